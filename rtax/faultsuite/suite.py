"""One fault-suite run: set up, rollouts under faults, then the figures (docs/faults.md).

Why this shape: the rollouts run through `rtax schedule` as a real subprocess (so its SIGKILL is
real and its restart must reap and replay the spool), against a private Docker engine (which may
be restarted), a database on a small disk (which may be filled) and the three clouds' emulations
in this process (where their faults are planted). Everything the run makes lives under one
temporary directory and is removed at the end, whatever happens (Ctrl-C included).
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from rtax.core import paths
from rtax.faultsuite import scenario, tally
from rtax.faultsuite.disk import SmallDisk
from rtax.faultsuite.dockerd import PrivateEngine
from rtax.faultsuite.inject import Injector
from rtax.faultsuite.watch import DashboardReaders, EnvironmentSearch, LogFollower, search_files

log = logging.getLogger(__name__)

#: After the faults: how long the scheduler has to finish one more rollout (it is alive), to
#: stop on SIGTERM, and the leftovers' removal to settle (the kubelet removes in the background).
RECOVERY_S = 180.0
STOP_S = 60.0
SETTLE_S = 60.0
#: A scheduler that died on its own is restarted (as a service manager would) at most this often,
#: and given up on after this many deaths in a row within their first minute, spanning at least
#: `GIVE_UP_S` (a disk full for a while must not end the run).
RESTART_S = 5.0
GIVE_UP_AFTER = 5
GIVE_UP_S = 120.0
#: How long a restarted scheduler may take to say it serves (fixture, engine, emulations and a
#: reaper pass come first: about 6 s here, more on a loaded CI machine).
SERVING_S = 180.0
#: What a scheduler logs once it serves (`rtax.service.scheduler.Scheduler.start`).
SERVING = " INFO scheduler started: "


@contextlib.contextmanager
def _environment(values: dict[str, str]) -> Iterator[None]:
    """`values` in this process's environment (the emulations' Docker clients read
    ``DOCKER_HOST``), restored afterwards."""
    saved = {k: os.environ.get(k) for k in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


class SchedulerProcess:
    """`rtax schedule` as a subprocess, one log file per start."""

    def __init__(self, config: Path, logs: Path, env: dict[str, str], follower: LogFollower):
        self.config, self.logs, self.env, self.follower = config, logs, env, follower
        self.proc: subprocess.Popen | None = None
        self.starts = 0
        self.deaths: list[str] = []  # exits nobody asked for
        self.lock = threading.Lock()
        self.given_up = False
        self._started_at = 0.0
        self._early_deaths = 0  # in a row, each within a minute of its start
        self._first_early = 0.0  # when the first of them was seen

    def start(self) -> None:
        self.starts += 1
        self._started_at = time.monotonic()
        path = self.logs / f"scheduler-{self.starts}.log"
        self.follower.add(path)
        with path.open("w") as out:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "rtax", "schedule", "--config", str(self.config)],
                stdout=out,
                stderr=subprocess.STDOUT,
                env=self.env,
                cwd=paths.checkout_root(),
                start_new_session=True,
            )

    def check(self) -> None:
        """Restart a scheduler that died on its own (each death is counted against it), at
        most every `RESTART_S`; give up after `GIVE_UP_AFTER` early deaths in a row."""
        with self.lock:
            if self.given_up or self.proc is None or self.proc.poll() is None:
                return
            lived = time.monotonic() - self._started_at
            if lived < RESTART_S:
                return  # restarted once its back-off is over
            # counted once: the next call sees the new process, or has given up
            self.deaths.append(f"scheduler start {self.starts} exited {self.proc.returncode}")
            self._early_deaths = self._early_deaths + 1 if lived < 60 else 1
            if self._early_deaths == 1:
                self._first_early = time.monotonic()
            span = time.monotonic() - self._first_early
            if self._early_deaths >= GIVE_UP_AFTER and span >= GIVE_UP_S:
                self.given_up = True
                self.deaths.append(f"given up after {GIVE_UP_AFTER} failed starts in a row")
                return
            self.start()

    def sigkill(self) -> bool:
        """SIGKILL, then start the next one (which must reap and write the spool), and return
        once it serves (or died, or `SERVING_S` passed: the table says so either way).

        Why wait: the faults come one at a time, and the fault after this one (a full disk, in
        every round) is meant for a running scheduler. Returning at the restart let the disk fill
        while the new scheduler was still starting (half a second after it served, here; before,
        on a loaded CI machine), and a scheduler that *starts* on a full disk can't take its lock
        or open its database: it exits 2, as does every restart until the disk is freed."""
        with self.lock:
            if self.given_up or self.proc is None or self.proc.poll() is not None:
                return False
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait(timeout=STOP_S)
            self._early_deaths = 0
            self.start()
            log_path = self.logs / f"scheduler-{self.starts}.log"
        if not self._serving_within(log_path, SERVING_S) and self.alive():
            # (one that exited is counted by `check`); the table must not read "alive" then
            with self.lock:
                self.deaths.append(
                    f"scheduler start {self.starts} did not say it serves within "
                    f"{SERVING_S:.0f} s of the SIGKILL"
                )
        return True

    def _serving_within(self, log_path: Path, timeout_s: float) -> bool:
        """Whether the start logging to `log_path` said it serves before it exited or
        `timeout_s` passed."""
        deadline = time.monotonic() + timeout_s
        while True:
            proc = self.proc
            ended = proc is None or proc.poll() is not None  # before the read: its last line too
            with contextlib.suppress(FileNotFoundError):
                if SERVING in log_path.read_text(errors="replace"):
                    return True
            if ended or time.monotonic() >= deadline:
                return False
            time.sleep(0.2)  # polling the log for one line, with a deadline

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def stop(self) -> None:
        with self.lock:
            if self.proc is None or self.proc.poll() is not None:
                return
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=STOP_S)
            except subprocess.TimeoutExpired:
                self.deaths.append("scheduler did not stop on SIGTERM within 60 s")
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(timeout=STOP_S)


def _run_cli(args: list[str], env: dict[str, str], out: Path, timeout: float) -> str:
    with out.open("w") as sink:
        subprocess.run(
            [sys.executable, "-m", "rtax", *args],
            stdout=sink,
            stderr=subprocess.STDOUT,
            env=env,
            cwd=paths.checkout_root(),
            timeout=timeout,
            check=False,
        )
    return out.read_text()


def _start_emulations(canary: dict[str, str]) -> dict[str, Any]:
    from rtax.emulation import get_emulation

    emus: dict[str, Any] = {}
    try:
        emus["kubernetes"] = get_emulation("kubernetes", token=canary[scenario.KUBE_TOKEN_ENV])
        emus["ec2"] = get_emulation("ec2")
        emus["daytona"] = get_emulation("daytona")
        emus["daytona"].api_key = canary["DAYTONA_API_KEY"]
        for emu in emus.values():
            emu.start()
    except BaseException:
        _stop_emulations(emus)
        raise
    return emus


def _stop_emulations(emus: dict[str, Any]) -> None:
    for emu in reversed(list(emus.values())):
        try:
            emu.stop()
        except Exception as exc:
            log.warning("emulation %s did not stop cleanly: %s", emu.kind, exc)


def run(
    size: scenario.Size, *, keep: bool = False, progress: Callable | None = None
) -> tally.Outcome:
    """One run of the suite at `size`; everything it made is removed before it returns."""
    root = Path(tempfile.mkdtemp(prefix="rtax-faults-"))
    canary = scenario.canaries()
    env_values = {
        **canary,
        "RTAX_DATA_DIR": str(root / "data"),
        "RTAX_FIXTURES_DIR": str(paths.fixtures_dir()),
        "RTAX_TOOLCHAIN_DIR": str(paths.toolchain_dir()),
        "RTAX_LOCAL_ROOT": str(root / "local"),
        # the second spool (where records go when the database's disk is full) stays inside
        # the run: searched for secrets, counted, removed with it
        "RTAX_SPOOL_DIR": str(root / "spool"),
    }
    outcome = tally.Outcome(target=size.target)
    try:
        with contextlib.ExitStack() as stack:
            engine = stack.enter_context(PrivateEngine(root / "engine"))
            env_values["DOCKER_HOST"] = engine.host
            stack.enter_context(_environment(env_values))
            disk = stack.enter_context(SmallDisk(root / "db"))
            emus = _start_emulations(canary)
            stack.callback(_stop_emulations, emus)
            _measure(size, root, engine, disk, emus, canary, outcome, progress)
    finally:
        if keep:
            outcome.notes.append(f"kept {root}")
        else:
            shutil.rmtree(root, ignore_errors=True)
    return outcome


def _measure(
    size: scenario.Size,
    root: Path,
    engine: PrivateEngine,
    disk: SmallDisk,
    emus: dict[str, Any],
    canary: dict[str, str],
    outcome: tally.Outcome,
    progress: Callable | None,
) -> None:
    """Run the scheduler under the faults, then count what it left: rows, leaks, secrets."""
    database = disk.path / "rtax.db"
    logs = root / "logs"
    logs.mkdir()
    env = dict(os.environ)
    config = _configure(root, database, emus, env, logs)
    follower = LogFollower()
    scheduler = SchedulerProcess(config, logs, env, follower)
    stop_readers, stop_faults = threading.Event(), threading.Event()
    readers = DashboardReaders(database, stop_readers)
    secrets = [canary[k] for k in scenario.SECRET_VARS]
    search = EnvironmentSearch(root / "local", engine, secrets, stop_readers)
    injector = Injector(
        engine,
        disk,
        emus,
        kill_scheduler=scheduler.sigkill,
        finished=lambda: len(follower.finished),
        stopping=stop_faults,
        local_root=root / "local",
    )
    plan = scenario.schedule(size)
    scheduler.start()
    readers.start()
    search.start()
    try:
        _fault_phase(size, plan, scheduler, follower, injector, progress)
        outcome.scheduler_alive = _recovered(scheduler, follower, injector)
    finally:
        stop_faults.set()
        stop_readers.set()
        scheduler.stop()
        readers.join()
        search.join()
    follower.poll()
    outcome.finished = dict(follower.finished)
    outcome.faults.update(injector.counts)
    outcome.faults["dashboard reads"] = readers.polls
    outcome.locked_errors = readers.locked + follower.locked
    outcome.notes += [f"scheduler: {d}" for d in scheduler.deaths]
    outcome.notes += injector.misses
    outcome.notes += [f"dashboard reader: {n}x {e}" for e, n in readers.errors.items()]
    _final_pass(root, engine, config, env, logs, outcome)
    rows_of(database, outcome, root / "spool")
    exports = _export(root, database, env, logs)
    found = search_files(
        [disk.path, root / "spool", logs, exports, engine.root / "dockerd.log"], secrets
    )
    if search.local_hits:
        found["environ of local commands"] = len(search.local_hits)
    if search.container_hits:
        found["environ of containers"] = len(search.container_hits)
    outcome.secrets = found


def _configure(
    root: Path, database: Path, emus: dict[str, Any], env: dict[str, str], logs: Path
) -> Path:
    """The suite's configuration file, checked by `rtax config check` as a user would."""
    config = root / "rtax-faults.toml"
    config.write_text(
        scenario.config_text(database, {k: e.substrate_params() for k, e in emus.items()})
    )
    check = _run_cli(["config", "check", "--config", str(config)], env, logs / "check.log", 60)
    if ": ok;" not in check:
        raise RuntimeError(f"the generated configuration is refused: {check.strip()}")
    return config


def _recovered(scheduler: SchedulerProcess, follower: LogFollower, injector: Injector) -> bool:
    """Recovery: the faults are over; the scheduler must still be running and recording."""
    injector.clear()
    mark, deadline = len(follower.finished), time.monotonic() + RECOVERY_S
    while len(follower.finished) <= mark and time.monotonic() < deadline and not scheduler.given_up:
        scheduler.check()
        follower.poll()
        time.sleep(0.5)  # polling the logs, with a deadline
    return scheduler.alive() and len(follower.finished) > mark and not scheduler.deaths


def _export(root: Path, database: Path, env: dict[str, str], logs: Path) -> Path:
    """Both tables exported through `rtax export`, as a user would (searched for secrets)."""
    exports = root / "exports"
    exports.mkdir()
    for table in ("runs", "actions"):
        out = exports / f"{table}.csv"
        _run_cli(
            ["export", "--db", str(database), "--table", table, "--out", str(out)],
            env,
            logs / f"export-{table}.log",
            300,
        )
    return exports


def _fault_phase(
    size: scenario.Size,
    plan: list[tuple[int, str]],
    scheduler: SchedulerProcess,
    follower: LogFollower,
    injector: Injector,
    progress: Callable | None,
) -> None:
    """Inject `plan`'s faults as the rollouts reach them, one at a time in a worker thread
    (an injector may wait for a target), until the target and the last fault are done."""
    pending = list(plan)
    worker: threading.Thread | None = None
    deadline = time.monotonic() + size.deadline_s
    while time.monotonic() < deadline:
        follower.poll()
        scheduler.check()
        done = len(follower.finished)
        if progress is not None:
            progress(done, pending[0][1] if pending else "recovery")
        idle = worker is None or not worker.is_alive()
        if idle and pending and done >= pending[0][0]:
            _, kind = pending.pop(0)
            worker = threading.Thread(target=injector.inject, args=(kind,), daemon=True)
            worker.start()
        elif idle and not pending and done >= size.target:
            return
        if scheduler.given_up:
            log.warning("the scheduler can't be started any more: the fault phase ends here")
            return
        time.sleep(0.5)  # the monitor's pace: logs are polled, faults fire at thresholds
    log.warning("the fault phase reached its deadline (%.0f s)", size.deadline_s)
    if worker is not None:
        worker.join(timeout=120)


def _final_pass(
    root: Path,
    engine: PrivateEngine,
    config: Path,
    env: dict[str, str],
    logs: Path,
    outcome: tally.Outcome,
) -> None:
    """One reaper pass (`rtax reap`, the scheduler stopped), then what is left, per substrate,
    as the engine shows it and as each substrate's API lists it."""
    from rtax.settings import config as rtax_config
    from rtax.substrates import build_substrate

    text = _run_cli(["reap", "--config", str(config)], env, logs / "reap.log", 900)
    outcome.reaped = sum(
        1 for line in text.splitlines() if line.startswith("removed ") and "(run " in line
    )
    outcome.locked_errors += text.count(tally.LOCKED)
    deadline = time.monotonic() + SETTLE_S
    while engine.containers("label=rtax") and time.monotonic() < deadline:
        time.sleep(0.5)  # the emulations remove backing containers in the background
    containers: dict[str, int] = {}
    for cid in engine.containers():
        shown = engine.docker(
            "inspect",
            "--format",
            '{{index .Config.Labels "rtax.substrate"}} {{index .Config.Labels "rtax.run_id"}} '
            "{{.State.Status}} {{.Name}}",
            cid,
        ).stdout.strip()
        label = shown.split(" ", 1)[0]
        name = label.removesuffix("-emulation") if label else "unlabelled containers"
        containers[name] = containers.get(name, 0) + 1
        outcome.notes.append(f"left on the engine: {cid[:12]} {shown}")
    api: dict[str, int] = {}
    conf = rtax_config.load(config)
    for name, entry in conf.substrates.items():
        try:
            substrate = build_substrate(entry)
            left = substrate.leftovers()
            api[name] = len(left)
            outcome.notes += [
                f"{name} lists: {lo.env_id} (run {lo.run_id}, owner {lo.owner})" for lo in left
            ]
            with contextlib.suppress(Exception):
                substrate.close()
        except Exception as exc:
            outcome.unchecked.append(name)
            outcome.notes.append(f"could not list {name} leftovers: {type(exc).__name__}: {exc}")
    leaked = {n: max(containers.get(n, 0), api.get(n, 0)) for n in {*containers, *api}}
    local_root = root / "local"
    leaked["local dirs"] = len(list(local_root.iterdir())) if local_root.is_dir() else 0
    outcome.leaked = leaked


def rows_of(database: Path, outcome: tally.Outcome, spool_dir: Path | None = None) -> None:
    """Each stored run's completed actions and its stored action rows; the records left in
    the spool beside the database and in `spool_dir` (the second spool)."""
    from rtax.store.database import Store

    with Store(database, create=False) as store:
        runs = store.runs.read(columns=["run_id", "n_actions_done"])
        actions = store.runs.actions(phase="action")
    stored = actions.groupby("run_id").size().to_dict() if not actions.empty else {}
    done = runs["n_actions_done"].fillna(0).astype(int)  # None: a rollout that never started
    outcome.rows = {
        run_id: (int(n), int(stored.get(run_id, 0)))
        for run_id, n in zip(runs["run_id"], done, strict=True)
    }
    spools = [Path(f"{database}.spool.jsonl")]
    if spool_dir is not None and spool_dir.is_dir():
        spools += sorted(spool_dir.glob("*.spool.jsonl"))
    outcome.spooled = sum(
        sum(1 for line in spool.read_text().splitlines() if line.strip())
        for spool in spools
        if spool.is_file()
    )
