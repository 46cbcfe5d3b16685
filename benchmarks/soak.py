"""`make soak` (`SOAK_MIN`, default 60): the scheduler with the shipped plans at a faster cadence
for `SOAK_MIN` minutes, read and scraped as it would be in service, and watched from outside
(docs/soak.md; issue 25).

Beside the scheduler (`rtax schedule`, the shipped rtax.toml with every plan's interval and
jitter divided by `SPEED`, a database of its own in a temporary folder) run what reads it in
service: `rtax dashboard`, loaded page after page by Debian's Chromium every few seconds;
Debian's Prometheus scraping its `/metrics`; and a local webhook receiver as the alerts' URL.
Every `sample_s` (a minute; a tenth of a minute in runs shorter than 30 minutes, so a short run
still has points) the scheduler's resident memory, open files and threads (/proc) and the
database's and WAL's sizes are sampled. At the end: their slopes per hour after the warm-up,
the rollouts started against those stored, spooled or abandoned at the stop (from the
scheduler's own log lines), and a verdict per target; exit 1 on any miss.

Why a script beside the benchmarks and not a test: it runs for an hour, and its figures are
slopes and counts to read, not a pass at one moment; CI runs a 5-minute one (`.ci/run`). The
figures are pure functions below (`slope_per_hour`, `floor_rise`, `verdicts`), unit-tested in
tests/test_soak.py.
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import http.server
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.parse
import urllib.request
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent

#: The shipped plans' intervals and jitters are divided by this.
SPEED = 10
#: Targets (issue 25): resident memory grows at most this much per hour after the warm-up ...
RSS_MB_PER_H = 5.0
#: ... judged only over at least this much time after the warm-up: a 5-minute run's slope is
#: noise at this resolution (one 1 MB step in 3 minutes is 20 MB/h), so it is printed, not judged
RSS_JUDGED_AFTER_S = 20 * 60
#: the WAL stays under this
WAL_MAX_MB = 64.0
#: open files and threads are flat: their floor (the fewest seen, when no rollout holds any)
#: over the second half after the warm-up is at most this much above the first half's
FLOOR_SLACK = 2
#: the warm-up: the first 10 minutes, or a third of a shorter run
WARM_UP_S = 10 * 60
#: the dashboard's reader loads a page at most this often, and fails a load after this long
READ_EVERY_S = 5.0
LOAD_TIMEOUT_S = 120.0
#: Prometheus scrapes this often; at least this share of its scrapes must reach /metrics
SCRAPE_S = 5
SCRAPES_UP = 0.95
#: the pages the reader cycles through (pages/)
PAGES = (
    "",
    "timeline",
    "cold_start",
    "decomposition",
    "amortization",
    "projection",
    "capacity",
    "paths",
    "data",
)


# -- the figures (pure) --------------------------------------------------------------------------


@dataclass(frozen=True)
class Sample:
    """One look at the scheduler: seconds since the soak began, then what /proc and the
    database's folder showed.

    `rss_anon_mb` and `rss_file_mb` split `rss_mb` (with the small shared part, not kept). The
    anonymous part is the heap: Python's objects, the native allocators' pools and SQLite's own
    page cache (the store maps no database file, so SQLite reads pages into malloc'd memory).
    The file-backed part is mapped files: the interpreter, the extension modules and their
    libraries, which the kernel may drop and read back. Why keep both: a heap that grows is
    what a leak looks like, while a process touching more of its libraries is not."""

    t: float
    rss_mb: float
    fds: int
    threads: int
    db_mb: float
    wal_mb: float
    rss_anon_mb: float
    rss_file_mb: float


#: samples.csv's columns, in order (one row per sample, written as it is taken)
CSV_COLUMNS = tuple(f.name for f in fields(Sample))


def write_sample(path: Path, sample: Sample) -> None:
    """Append `sample` to the CSV at `path`, with the header first when the file is new. Why a
    row at a time: a soak cut short (Ctrl-C, a dead scheduler) keeps every minute it took, and
    the hour's shape (levels, steps, a creep that levels off) can be read back, not only its
    slope."""
    new = not path.exists()
    with path.open("a", newline="") as out:
        writer = csv.writer(out)
        if new:
            writer.writerow(CSV_COLUMNS)
        writer.writerow([getattr(sample, name) for name in CSV_COLUMNS])


def read_samples(path: Path) -> list[Sample]:
    """The samples a soak wrote to `path` (write_sample), for reading an hour back."""
    with path.open(newline="") as source:
        rows = list(csv.DictReader(source))
    ints = {"fds", "threads"}
    return [
        Sample(**{k: (int(v) if k in ints else float(v)) for k, v in row.items()}) for row in rows
    ]


def slope_per_hour(points: Sequence[tuple[float, float]]) -> float | None:
    """The least-squares slope of (seconds, value) points, per hour; None under two points or
    when every point has one time."""
    if len(points) < 2:
        return None
    n = len(points)
    mt = sum(t for t, _ in points) / n
    mv = sum(v for _, v in points) / n
    var = sum((t - mt) ** 2 for t, _ in points)
    if var == 0:
        return None
    cov = sum((t - mt) * (v - mv) for t, v in points)
    return cov / var * 3600.0


def warm_up_s(minutes: float) -> float:
    """The first 10 minutes, or a third of a run shorter than 30 minutes."""
    return min(WARM_UP_S, minutes * 60.0 / 3.0)


def floor_rise(values: Sequence[float]) -> float | None:
    """How far the floor of `values` rose: the minimum of their second half minus that of their
    first half. Why the floor: a rollout in flight holds files and threads for its while, so a
    sample taken during one is high; a leak raises the level they return to between rollouts.
    None under four values."""
    if len(values) < 4:
        return None
    half = len(values) // 2
    return min(values[half:]) - min(values[:half])


@dataclass
class Accounting:
    """The rollouts the scheduler's log says it started, and what became of them."""

    started: int = 0
    finished: dict[str, str] = field(default_factory=dict)  # run id -> substrate (announced)
    abandoned: int = 0  # cancelled by the stop: no sample
    not_kept: int = 0  # "could not keep the rollout": an error, counted as unaccounted
    stored: int = 0  # of `finished`, rows in the database
    spooled: int = 0  # records waiting in a spool

    @property
    def unaccounted(self) -> int:
        """Started rollouts neither stored, nor spooled, nor abandoned at the stop. A setup
        failure is announced without a start, so finished may exceed started by those."""
        missing_rows = len(self.finished) - self.stored - self.spooled
        never_finished = self.started - len(self.finished) - self.abandoned
        return max(0, missing_rows) + max(0, never_finished) + self.not_kept


@dataclass(frozen=True)
class Verdict:
    target: str
    figure: str
    ok: bool | None  # None: not judged (said why in `figure`)


def verdicts(samples: Sequence[Sample], minutes: float, acc: Accounting) -> list[Verdict]:
    """One verdict per target over the samples after the warm-up."""
    warm = warm_up_s(minutes)
    after = [s for s in samples if s.t >= warm]
    out: list[Verdict] = []
    rss = slope_per_hour([(s.t, s.rss_mb) for s in after])
    span = (after[-1].t - after[0].t) if len(after) >= 2 else 0.0
    if rss is None:
        out.append(Verdict("resident memory", "too few samples after the warm-up", False))
    elif span < RSS_JUDGED_AFTER_S:
        out.append(
            Verdict(
                "resident memory",
                f"{rss:+.1f} MB/h over {span / 60:.0f} min after the warm-up (not judged: "
                f"a slope of {RSS_MB_PER_H:g} MB/h needs >= {RSS_JUDGED_AFTER_S / 60:.0f} min)",
                None,
            )
        )
    else:
        out.append(
            Verdict(
                "resident memory",
                f"{rss:+.2f} MB/h after the warm-up (target <= {RSS_MB_PER_H:g} MB/h)",
                rss <= RSS_MB_PER_H,
            )
        )
    for name, key in (("open files", "fds"), ("threads", "threads")):
        values = [getattr(s, key) for s in after]
        rise = floor_rise(values)
        slope = slope_per_hour([(s.t, getattr(s, key)) for s in after])
        if rise is None:
            out.append(Verdict(name, "too few samples after the warm-up", False))
            continue
        out.append(
            Verdict(
                name,
                f"floor {min(values[: len(values) // 2])} -> {min(values[len(values) // 2 :])} "
                f"(rise {rise:+g}, target <= {FLOOR_SLACK}); slope {slope:+.1f}/h, "
                f"range {min(values)}-{max(values)}",
                rise <= FLOOR_SLACK,
            )
        )
    wal = max((s.wal_mb for s in samples), default=0.0)
    out.append(
        Verdict("WAL", f"largest {wal:.1f} MB (target < {WAL_MAX_MB:g} MB)", wal < WAL_MAX_MB)
    )
    out.append(
        Verdict(
            "rollouts accounted for",
            f"started {acc.started}: stored {acc.stored}, spooled {acc.spooled}, abandoned at "
            f"the stop {acc.abandoned}, announced {len(acc.finished)}; unaccounted "
            f"{acc.unaccounted}",
            acc.started > 0 and acc.unaccounted == 0,
        )
    )
    return out


_STARTED = re.compile(r"rollout started: ")
_ABANDONED = re.compile(r"rollout abandoned \(stopping\): ")
_NOT_KEPT = re.compile(r"could not keep the rollout")


def account(lines: Sequence[str], acc: Accounting) -> None:
    """Count the scheduler's log `lines` into `acc` (finished runs by run id)."""
    from rtax.faultsuite import tally

    acc.started += sum(bool(_STARTED.search(line)) for line in lines)
    acc.abandoned += sum(bool(_ABANDONED.search(line)) for line in lines)
    acc.not_kept += sum(bool(_NOT_KEPT.search(line)) for line in lines)
    acc.finished.update(tally.finished_runs(lines))


def common_lines(lines: Sequence[str], most: int = 5) -> list[str]:
    """The scheduler log's warnings and errors, alike ones counted together, most common first:
    a line's timestamp is dropped and its numbers and hex ids become '#', so "rollout 3f2a...
    failed after 1.2 s" and its next occurrence are one kind. Why: the soak deletes its folder
    (logs included) unless --keep, and a count of warnings alone says nothing of what they were."""
    stamp = re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d,\d+ ")
    masks = re.compile(r"\b[0-9a-f]{8,}\b|\d+(?:\.\d+)?")
    kinds = Counter(masks.sub("#", stamp.sub("", line.strip()))[:200] for line in lines)
    return [f"{n} x {text}" for text, n in kinds.most_common(most)]


def fast_config(text: str, database: Path, metrics_port: int, speed: int = SPEED) -> str:
    """The shipped rtax.toml's `text` with its database at `database`, its /metrics on
    `metrics_port`, and every ``interval``/``jitter`` of a ``[[plans]]`` table divided by
    `speed` (whole seconds, at least one); nothing else changes (objectives, alerts, retention
    and detection keep their shipped settings)."""
    from rtax.core.checks import duration

    out, section = [], ""
    for line in text.splitlines():
        head = re.match(r"\s*\[\[?([^\]]+)\]\]?", line)
        if head:
            section = head.group(1).strip()
        key = re.match(r'(\s*)(interval|jitter|database|port)\s*=\s*"?([^"#\s]+)"?(.*)$', line)
        if key:
            indent, name, value, rest = key.groups()
            if name == "database" and section == "":
                line = f'{indent}database = "{database}"{rest}'
            elif name == "port" and section == "metrics":
                line = f"{indent}port = {metrics_port}{rest}"
            elif name in ("interval", "jitter") and section == "plans":
                seconds = max(1, round(duration(value) / speed))
                line = f'{indent}{name} = "{seconds}s"{rest}'
        out.append(line)
    return "\n".join(out) + "\n"


def report(
    samples: Sequence[Sample],
    minutes: float,
    acc: Accounting,
    extra: dict,
    problems: Sequence[str] = (),
) -> str:
    """The soak's table: the samples' first and last, slopes, the readers' counts, verdicts,
    and the `problems` that fail the run besides the targets."""
    lines = [f"rtax soak: {minutes:g} min, plans {SPEED}x faster than rtax.toml"]
    if samples:
        first, last = samples[0], samples[-1]
        after = [s for s in samples if s.t >= warm_up_s(minutes)]
        lines.append(f"samples: {len(samples)} (warm-up {warm_up_s(minutes) / 60:.1f} min)")
        for label, key, unit in (
            ("resident memory", "rss_mb", "MB"),
            ("  anonymous", "rss_anon_mb", "MB"),
            ("  file-backed", "rss_file_mb", "MB"),
            ("open files", "fds", ""),
            ("threads", "threads", ""),
            ("database", "db_mb", "MB"),
            ("WAL", "wal_mb", "MB"),
        ):
            slope = slope_per_hour([(s.t, getattr(s, key)) for s in after])
            lines.append(
                f"  {label:16} first {getattr(first, key):g}{unit}, last {getattr(last, key):g}"
                f"{unit}, max {max(getattr(s, key) for s in samples):g}{unit}; slope after "
                f"warm-up {'n/a' if slope is None else f'{slope:+.2f}{unit}/h'}"
            )
    for label, value in extra.items():
        lines.append(f"{label}: {value}")
    missed, judged = 0, 0
    for v in verdicts(samples, minutes, acc):
        judged += v.ok is not None
        word = "not judged" if v.ok is None else ("meets target" if v.ok else "MISSES target")
        missed += v.ok is False
        lines.append(f"{v.target}: {v.figure}: {word}")
    lines += [f"FAILED: {p}" for p in problems]
    summary = f"all {judged} judged targets met" if not missed else f"{missed} of {judged} MISSED"
    if problems:
        summary += f"; {len(problems)} other failure{'s' * (len(problems) > 1)}"
    lines.append(f"rtax soak summary: {summary}")
    return "\n".join(lines)


# -- what runs beside the scheduler --------------------------------------------------------------


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class Webhook:
    """A local Slack-compatible webhook: counts the alerts' POSTs."""

    def __init__(self) -> None:
        self.posts: list[dict] = []
        soak = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                with contextlib.suppress(ValueError):
                    soak.posts.append(json.loads(body or b"{}"))
                self.send_response(200)
                self.end_headers()
                self.wfile.write(b"ok")

            def log_message(self, *args: Any) -> None:
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hook"
        self._thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    def __enter__(self) -> Webhook:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()


class Prometheus:
    """Debian's Prometheus on a free loopback port scraping `target` every `SCRAPE_S`."""

    def __init__(self, tmp: Path, target: str) -> None:
        binary = shutil.which("prometheus")
        if binary is None:
            raise SystemExit("soak: no prometheus binary (`make prometheus` installs Debian's)")
        self.port = _free_port()
        conf = tmp / "prometheus.yml"
        conf.write_text(
            f"global:\n  scrape_interval: {SCRAPE_S}s\n"
            "scrape_configs:\n  - job_name: rtax\n    static_configs:\n"
            f"      - targets: ['{target}']\n"
        )
        self.log = (tmp / "prometheus.log").open("w")
        self.process = subprocess.Popen(
            [
                binary,
                f"--config.file={conf}",
                f"--storage.tsdb.path={tmp / 'tsdb'}",
                f"--web.listen-address=127.0.0.1:{self.port}",
            ],
            stdout=self.log,
            stderr=subprocess.STDOUT,
        )

    def scalar(self, expr: str) -> float | None:
        url = f"http://127.0.0.1:{self.port}/api/v1/query?" + urllib.parse.urlencode(
            {"query": expr}
        )
        try:
            with urllib.request.urlopen(url, timeout=30) as response:
                result = json.loads(response.read())["data"]["result"]
        except OSError:
            return None
        return float(result[0]["value"][1]) if len(result) == 1 else None

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(timeout=10)
        self.log.close()


class Reader:
    """Chromium loading the dashboard's pages one after another, a load every
    `READ_EVERY_S` at most: counts loads, failed loads (timeouts, errors, a page's exception
    box) and why."""

    def __init__(self, url: str, stop: threading.Event) -> None:
        self.url, self.stop = url, stop
        self.loads = 0
        self.failed: Counter[str] = Counter()
        self._thread = threading.Thread(target=self._run, daemon=True, name="reader")

    def start(self) -> None:
        self._thread.start()

    def join(self) -> None:
        self._thread.join(timeout=LOAD_TIMEOUT_S + 30)

    def _run(self) -> None:
        from browser import chromium  # the browser tests' helpers (tests/browser.py)

        try:
            with chromium() as browser:
                self._read(browser)
        except BaseException as exc:  # no browser at all (a skip or a failed launch) fails too
            self.failed[f"Chromium: {type(exc).__name__}: {str(exc)[:120]}"] += 1

    def _read(self, browser: Any) -> None:
        timeout_ms = LOAD_TIMEOUT_S * 1000
        i = 0
        while not self.stop.is_set():
            began = time.monotonic()
            path = PAGES[i % len(PAGES)]
            i += 1
            page = browser.new_page(viewport={"width": 1400, "height": 1200})
            try:
                page.set_default_timeout(timeout_ms)
                page.goto(f"{self.url}/{path}", timeout=timeout_ms)
                page.locator("h1").first.wait_for()
                page.wait_for_load_state("networkidle")
                if page.locator('[data-testid="stException"]').count():
                    self.failed[f"{path or 'overview'}: an exception on the page"] += 1
                else:
                    self.loads += 1
            except Exception as exc:
                self.failed[f"{path or 'overview'}: {type(exc).__name__}"] += 1
            finally:
                page.close()
            self.stop.wait(max(0.0, READ_EVERY_S - (time.monotonic() - began)))


@dataclass(frozen=True)
class ProcStatus:
    """What /proc says of one process: resident MB (all, anonymous, file-backed), open files and
    threads."""

    rss_mb: float
    rss_anon_mb: float
    rss_file_mb: float
    fds: int
    threads: int


def proc_status(pid: int) -> ProcStatus:
    """/proc/PID/status and /proc/PID/fd of process `pid` (Linux: RssAnon and RssFile since
    4.5)."""
    status = Path(f"/proc/{pid}/status").read_text()
    found = dict(line.split(":", 1) for line in status.splitlines() if ":" in line)

    def mb(key: str) -> float:
        return float(found[key].split()[0]) / 1024.0

    return ProcStatus(
        mb("VmRSS"),
        mb("RssAnon"),
        mb("RssFile"),
        len(os.listdir(f"/proc/{pid}/fd")),
        int(found["Threads"]),
    )


def fd_kinds(pid: int) -> Counter[str]:
    """What process `pid`'s open files are: sockets, pipes, event fds and files by folder
    (why: a floor that rises says a leak; this says of what)."""
    kinds: Counter[str] = Counter()
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
        except OSError:
            continue
        kind = target.split(":", 1)[0] if ":" in target and not target.startswith("/") else None
        kinds[kind or str(Path(target).parent)] += 1
    return kinds


def _mb(path: Path) -> float:
    return path.stat().st_size / 1e6 if path.exists() else 0.0


@contextlib.contextmanager
def _browser_dashboard(env: dict[str, str]) -> Iterator[str]:
    from browser import dashboard  # the browser tests' launcher: `rtax dashboard`, free port

    with dashboard(env) as url:
        yield url


def run(minutes: float, keep: bool = False) -> int:
    from tqdm import tqdm

    from rtax.core import paths
    from rtax.faultsuite.suite import SchedulerProcess
    from rtax.faultsuite.watch import LogFollower

    root = Path(tempfile.mkdtemp(prefix="rtax-soak-"))
    sample_s = 60.0 if minutes >= 30 else 6.0
    database = root / "rtax.db"
    metrics_port = _free_port()
    config = root / "rtax-soak.toml"
    config.write_text(fast_config((ROOT / "rtax.toml").read_text(), database, metrics_port))
    logs = root / "logs"
    logs.mkdir()
    samples: list[Sample] = []
    kinds: dict[float, Counter[str]] = {}  # sample time -> the scheduler's open files by kind
    acc = Accounting()
    extra: dict[str, Any] = {}
    stop = threading.Event()
    try:
        with Webhook() as hook, contextlib.ExitStack() as stack:
            env = {
                **os.environ,
                "RTAX_DATA_DIR": str(root / "data"),
                "RTAX_LOCAL_ROOT": str(root / "local"),
                "RTAX_SPOOL_DIR": str(root / "spool"),
                "RTAX_FIXTURES_DIR": str(paths.fixtures_dir()),
                "RTAX_TOOLCHAIN_DIR": str(paths.toolchain_dir()),
                "RTAX_WEBHOOK_URL": hook.url,
            }
            follower = LogFollower()
            scheduler = SchedulerProcess(config, logs, env, follower)
            scheduler.start()
            stack.callback(scheduler.stop)
            prom = Prometheus(root, f"127.0.0.1:{metrics_port}")
            stack.callback(prom.stop)
            url = stack.enter_context(
                _browser_dashboard({"RTAX_CONFIG": str(config), "RTAX_DB": str(database)})
            )
            reader = Reader(url, stop)
            reader.start()
            stack.callback(reader.join)
            stack.callback(stop.set)
            seen = 0
            began = time.monotonic()
            end = began + minutes * 60.0
            every = 0.5 if sys.stderr.isatty() else 30.0
            bar = tqdm(total=round(minutes * 60), desc="soak", unit="s", mininterval=every)
            next_sample = began
            while time.monotonic() < end:
                now = time.monotonic()
                if now >= next_sample:
                    if not scheduler.alive():
                        extra["scheduler"] = f"exited {scheduler.proc.returncode} mid-soak"
                        break
                    proc = proc_status(scheduler.proc.pid)
                    kinds[round(now - began, 1)] = fd_kinds(scheduler.proc.pid)
                    samples.append(
                        Sample(
                            round(now - began, 1),
                            round(proc.rss_mb, 1),
                            proc.fds,
                            proc.threads,
                            round(_mb(database), 2),
                            round(_mb(Path(f"{database}-wal")), 2),
                            round(proc.rss_anon_mb, 1),
                            round(proc.rss_file_mb, 1),
                        )
                    )
                    write_sample(root / "samples.csv", samples[-1])
                    next_sample += sample_s
                follower.poll()
                bar.set_postfix_str(
                    f"rollouts {len(follower.finished)}, page loads {reader.loads}", refresh=False
                )
                bar.update(round(now - began) - bar.n)
                time.sleep(1.0)  # the sampler's pace, not a synchronisation
            bar.close()
            extra["Prometheus scrapes (up / all)"], scraped = _scrapes(prom, minutes)
            stop.set()
            scheduler.stop()
            follower.poll()
            for path in follower.paths:
                account(path.read_text(errors="replace").splitlines(), acc)
            seen = len(acc.finished)
            extra["scheduler log warnings/errors"] = len(follower.lines)
            for i, line in enumerate(common_lines(follower.lines), 1):
                extra[f"  warning/error kind {i}"] = line
            extra["'database is locked'"] = follower.locked
            extra["dashboard page loads (ok / failed)"] = (
                f"{reader.loads} / {sum(reader.failed.values())}"
                + (f" ({dict(reader.failed)})" if reader.failed else "")
            )
            extra["webhook posts"] = len(hook.posts)
            extra["rollouts announced"] = seen
        extra["open files at the floors (first half / second half after the warm-up)"] = (
            _floor_kinds(samples, kinds, minutes)
        )
        _stored(database, root / "spool", acc)
        if scheduler.deaths:
            extra["scheduler deaths"] = "; ".join(scheduler.deaths)
        problems = [
            *(["a dashboard page load failed"] if reader.failed else []),
            *([] if reader.loads else ["the dashboard's reader loaded no page"]),
            *(["'database is locked' in the scheduler's log"] if follower.locked else []),
            *(["the scheduler died"] if scheduler.deaths or "scheduler" in extra else []),
            *([] if scraped else ["Prometheus's scrapes of /metrics"]),
        ]
        text = report(samples, minutes, acc, extra, problems)
        print(text)
        (root / "soak.txt").write_text(text + "\n")
        failed = sum(v.ok is False for v in verdicts(samples, minutes, acc)) + len(problems)
        return 1 if failed else 0
    finally:
        if keep:
            print(f"kept {root} (its samples, a row each: {root / 'samples.csv'})")
        else:
            shutil.rmtree(root, ignore_errors=True)


def _floor_kinds(samples: list[Sample], kinds: dict[float, Counter[str]], minutes: float) -> str:
    after = [s for s in samples if s.t >= warm_up_s(minutes)]
    if len(after) < 4:
        return "n/a"
    half = len(after) // 2
    lows = [min(part, key=lambda s: s.fds) for part in (after[:half], after[half:])]
    return " / ".join(str(dict(sorted(kinds.get(s.t, Counter()).items()))) for s in lows)


def _scrapes(prom: Prometheus, minutes: float) -> tuple[str, bool]:
    """Prometheus's scrapes of /metrics over the soak that answered, and whether enough did."""
    window = f"{round(minutes * 60) + 60}s"
    up = prom.scalar(f"sum_over_time(up[{window}])") or 0.0
    total = prom.scalar(f"count_over_time(up[{window}])")
    if not total:
        return "none: Prometheus has no scrape of /metrics: MISSES target", False
    ok = up / total >= SCRAPES_UP
    word = "meets target" if ok else "MISSES target"
    return f"{up:.0f} / {total:.0f} ({up / total:.1%}; target >= {SCRAPES_UP:.0%}): {word}", ok


def _stored(database: Path, spool_dir: Path, acc: Accounting) -> None:
    """How many of the announced runs have a row; records still in either spool."""
    from rtax.store.database import Store

    with Store(database, create=False) as store:
        ids = set(store.runs.read(columns=["run_id"])["run_id"])
    acc.stored = sum(run_id in ids for run_id in acc.finished)
    spools = [Path(f"{database}.spool.jsonl"), *sorted(spool_dir.glob("*.spool.jsonl"))]
    acc.spooled = sum(
        sum(1 for line in p.read_text().splitlines() if line.strip()) for p in spools if p.exists()
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--minutes", type=float, default=float(os.environ.get("SOAK_MIN", 60)))
    parser.add_argument("--keep", action="store_true", help="keep the soak's folder")
    args = parser.parse_args(argv)
    if args.minutes < 1:
        parser.error("--minutes must be at least 1")
    sys.path.insert(0, str(ROOT / "tests"))
    # SIGTERM unwinds like Ctrl-C, so the scheduler, Prometheus, the dashboard and the browser
    # are stopped and the folder removed (a `kill` of the soak left its scheduler probing on).
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    return run(args.minutes, keep=args.keep)


if __name__ == "__main__":
    sys.exit(main())
