"""A real Prometheus (Debian's `prometheus`) scrapes a running scheduler's `/metrics`, and its HTTP
API gives back figures worked out from the database: rollouts stored, ok rollouts timed, a
failure counted by its class, the p50 in the bucket of the stored median, the last probe of a
series seeded from the database on start; and every query of the shipped Grafana dashboard runs.
Fed the shipped recorded series (benchmarks/series/recorded.csv.gz), its `histogram_quantile`
over rtax's latency buckets is within 10 % of each series' raw p95.

Needs the `prometheus` binary (`make test` installs it; scripts/ensure-prometheus.sh): skipped
without it, a failure under CI=true."""

from __future__ import annotations

import json
import os
import shutil
import socket
import statistics
import subprocess
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from factories import make_record
from polling import DEADLINE_S, wait_for
from rtax.analysis import stats
from rtax.core.failures import CreateFailed
from rtax.service.prometheus import LATENCY_BUCKETS, Endpoint, Metrics
from rtax.service.scheduler import Scheduler
from rtax.settings import SubstrateConfig, config
from rtax.store.database import Store
from rtax.substrates.base import Environment
from rtax.substrates.local import LocalSubstrate

ROOT = Path(__file__).resolve().parent.parent
DASHBOARD = ROOT / "docs" / "grafana" / "rtax.json"
#: The real series recorded on this machine (benchmarks/record_series.py); RTAX_RECORDED_SERIES
#: names another file of the same columns (a stand-in made with the recorder's --export).
RECORDED = Path(os.environ.get("RTAX_RECORDED_SERIES", ROOT / "benchmarks/series/recorded.csv.gz"))
ROLLOUTS = 3  # per substrate: odd, so the stored median is one sample


def _binary() -> str:
    found = shutil.which("prometheus")
    if found:
        return found
    reason = "no prometheus binary (Debian's `prometheus` package)"
    if os.environ.get("CI") == "true":
        pytest.fail(f"CI requires the Prometheus test: {reason}")
    pytest.skip(f"{reason}; `make test` as root installs it")


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class _Broken(LocalSubstrate):
    """A control plane that refuses every create: a classified substrate failure."""

    def create(self, run_id: str, *, lifetime_s: float | None = None) -> Environment:
        raise CreateFailed("the API refused the create (test)")


class _Prometheus:
    """A Prometheus on a free loopback port, scraping `target` every second, storing in `tmp`."""

    def __init__(self, tmp: Path, target: str) -> None:
        self.port = _free_port()
        conf = tmp / "prometheus.yml"
        conf.write_text(
            "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n"
            "scrape_configs:\n  - job_name: rtax\n    static_configs:\n"
            f"      - targets: ['{target}']\n"
        )
        self.log = (tmp / "prometheus.log").open("w")
        self.process = subprocess.Popen(
            [
                _binary(),
                f"--config.file={conf}",
                f"--storage.tsdb.path={tmp / 'tsdb'}",
                f"--web.listen-address=127.0.0.1:{self.port}",
            ],
            stdout=self.log,
            stderr=subprocess.STDOUT,
        )

    def query(self, expr: str) -> dict[str, Any]:
        """The API's answer to an instant query (raises on an HTTP error: a bad query)."""
        url = f"http://127.0.0.1:{self.port}/api/v1/query?" + urllib.parse.urlencode(
            {"query": expr}
        )
        with urllib.request.urlopen(url, timeout=DEADLINE_S) as response:
            return json.loads(response.read())

    def scalar(self, expr: str) -> float | None:
        """The one value of `expr` (None while there is none)."""
        result = self.query(expr)["data"]["result"]
        return float(result[0]["value"][1]) if len(result) == 1 else None

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(timeout=10)
        self.log.close()


@pytest.fixture
def scheduler(tmp_path: Path, attrs_fixture) -> Iterator[Scheduler]:
    """A scheduler whose one plan runs `ROLLOUTS` T0 rollouts on `local` and on `broken` at
    start (then not for an hour), over a database that already holds an older series."""
    file = tmp_path / "rtax.toml"
    file.write_text(f"""
database = "rtax.db"
[metrics]
port = 0
[[substrates]]
name = "local"
kind = "local"
[[substrates]]
name = "broken"
kind = "local"
[[plans]]
name = "once"
substrates = ["local", "broken"]
tier = "T0"
repeat = {ROLLOUTS}
interval = "1h"
""")
    conf = config.load(file)
    earlier = datetime.fromtimestamp(time.time() - 900, UTC).isoformat(timespec="microseconds")
    with Store(conf.database) as store:  # a series probed before this scheduler started
        store.save_rollout(
            make_record(
                "earlier", plan="once", substrate="retired", started_at=earlier, ended_at=earlier
            )
        )

    def factory(entry: SubstrateConfig, overrides: dict) -> LocalSubstrate:
        kind = _Broken if entry.name == "broken" else LocalSubstrate
        params = {"root": tmp_path / "envs", "template": attrs_fixture.template}
        return kind(name=entry.name, **params, **overrides)

    scheduler = Scheduler(conf, factory=factory, fixture=attrs_fixture)
    scheduler.start()
    try:
        yield scheduler
    finally:
        scheduler.stop(wait=True)


def test_prometheus_scrapes_what_the_database_holds(tmp_path: Path, scheduler: Scheduler) -> None:
    _binary()
    assert scheduler.metrics_url is not None
    target = urllib.parse.urlsplit(scheduler.metrics_url).netloc
    prometheus = _Prometheus(tmp_path, target)
    try:
        _check(prometheus, scheduler)
    except AssertionError as exc:  # say what Prometheus said, too
        tail = (tmp_path / "prometheus.log").read_text()[-2000:]
        raise AssertionError(f"{exc}\n--- prometheus.log (tail) ---\n{tail}") from exc
    finally:
        prometheus.stop()


def _check(prometheus: _Prometheus, scheduler: Scheduler) -> None:
    def stored() -> Any:
        with Store(scheduler.config.database, create=False) as store:
            runs = store.runs.read()
        new = runs[runs["run_id"] != "earlier"]
        return runs if len(new) == 2 * ROLLOUTS else None  # (a frame has no truth value)

    runs = wait_for(stored, f"{2 * ROLLOUTS} rollouts stored", interval_s=0.2, ignoring=(OSError,))
    new = runs[runs["run_id"] != "earlier"]
    ok = new[new["status"] == "ok"]
    failed = new[new["error_class"] == "create_failed"]
    assert (len(ok), len(failed)) == (ROLLOUTS, ROLLOUTS)  # the set-up, not the metrics

    def scraped(expr: str, expected: float) -> None:
        """Wait until Prometheus answers `expected` to `expr` (it may not listen yet)."""
        wait_for(
            lambda: prometheus.scalar(expr) == expected,
            f"Prometheus to answer {expr} == {expected}",
            interval_s=0.2,
            ignoring=(OSError,),
        )

    scraped('up{job="rtax"}', 1)  # a first scrape
    figures = {
        # every row this scheduler stored, by status and class
        "sum(rtax_rollouts_total)": len(new),
        'sum(rtax_rollouts_total{status="ok"})': len(ok),
        'sum(rtax_rollouts_total{substrate="broken",error_class="create_failed"})': len(failed),
        # only the ok rollouts are timed
        "sum(rtax_time_to_first_command_seconds_count)": len(ok),
        "sum(rtax_episode_seconds_count)": len(ok),
        'sum(rtax_time_to_first_command_seconds_count{substrate="broken"}) or vector(0)': 0,
    }
    for expr, expected in figures.items():
        scraped(expr, expected)

    total = prometheus.scalar('sum(rtax_time_to_first_command_seconds_sum{substrate="local"})')
    assert total == pytest.approx(ok["time_to_first_command_s"].sum(), rel=1e-9)
    # The p50 from the buckets lies in the bucket that holds the stored median.
    median = statistics.median(ok["time_to_first_command_s"])
    upper = min(b for b in (*LATENCY_BUCKETS, float("inf")) if b >= median)
    lower = max((b for b in LATENCY_BUCKETS if b < upper), default=0.0)
    p50 = prometheus.scalar(
        "histogram_quantile(0.5, sum by (le) "
        '(rtax_time_to_first_command_seconds_bucket{substrate="local"}))'
    )
    assert p50 is not None and lower <= p50 <= upper, (median, p50)
    # The last probe of each series: local's newest row; the retired series seeded on start.
    newest = datetime.fromisoformat(ok["ended_at"].max()).timestamp()
    stamp = prometheus.scalar('rtax_last_probe_timestamp_seconds{substrate="local"}')
    assert stamp == pytest.approx(newest, abs=1e-3)
    retired = prometheus.scalar('rtax_last_probe_age_seconds{substrate="retired"}')
    assert retired is not None and 900 <= retired < 900 + 300
    assert prometheus.scalar('sum(rtax_rollouts_total{substrate="retired"})') == 0

    # Every query of the shipped Grafana dashboard is one Prometheus accepts.
    board = json.loads(DASHBOARD.read_text())
    for panel in board["panels"]:
        for target in panel["targets"]:
            answer = prometheus.query(target["expr"])
            assert answer["status"] == "success", (panel["title"], answer)
    assert prometheus.query("rtax_last_probe_age_seconds")["data"]["result"]


def _recorded() -> pd.DataFrame:
    """The shipped series, one row per rollout; missing, the test fails (it never skips)."""
    if not RECORDED.is_file():
        pytest.fail(
            f"{RECORDED} is missing: record it with benchmarks/record_series.py --export (or "
            "point RTAX_RECORDED_SERIES at a file of its columns)"
        )
    frame = pd.read_csv(RECORDED, dtype={"error_class": str})
    assert len(frame) and {"series", "time_to_first_command_s", "episode_s"} <= set(frame)
    return frame


def _as_run(row: dict[str, Any]) -> dict[str, Any]:
    """A recorded row as the run row `Metrics.observe` reads (its series: ``docker T0``)."""
    substrate, tier = str(row["series"]).rsplit(" ", 1)
    cls = row.get("error_class")
    return {
        "substrate": substrate,
        "tier": tier,
        "steps": 0,
        "fidelity": "real",
        "status": row["status"],
        "error_class": cls if isinstance(cls, str) and cls else None,
        "started_at": row["started_at"],
        "time_to_first_command_s": row["time_to_first_command_s"],
        "episode_s": row["episode_s"],
    }


def test_histogram_quantile_of_the_recorded_series_is_within_10_percent_of_the_raw_p95(
    tmp_path: Path,
) -> None:
    """Every recorded rollout observed by `Metrics`, one scrape by a real Prometheus, then per
    series and latency `histogram_quantile(0.95, ...)` over the cumulative buckets against the
    raw p95 of its ok rollouts (linear interpolation, `rtax.analysis.stats.percentile`). With 8
    buckets per octave the interpolation inside one bucket is off by at most 9.05 %."""
    _binary()
    recorded = _recorded()
    metrics = Metrics()
    for row in recorded.to_dict("records"):
        metrics.observe(_as_run(row))
    endpoint = Endpoint(metrics, "127.0.0.1", 0)
    prometheus = _Prometheus(tmp_path, urllib.parse.urlsplit(endpoint.url).netloc)
    try:
        total = int((recorded["status"] == "ok").sum())
        wait_for(
            lambda: prometheus.scalar("sum(rtax_time_to_first_command_seconds_count)") == total,
            f"Prometheus to scrape {total} timed rollouts",
            interval_s=0.2,
            ignoring=(OSError,),
        )
        misses, compared = [], 0
        for name, group in recorded.groupby("series"):
            substrate, tier = str(name).rsplit(" ", 1)
            ok = group[group["status"] == "ok"]
            for metric, column in (
                ("time_to_first_command", "time_to_first_command_s"),
                ("episode", "episode_s"),
            ):
                raw = stats.percentile(ok[column], 95)
                buckets = f'rtax_{metric}_seconds_bucket{{substrate="{substrate}",tier="{tier}"}}'
                estimate = prometheus.scalar(f"histogram_quantile(0.95, sum by (le) ({buckets}))")
                compared += 1
                if estimate is None or abs(estimate - raw) > 0.10 * raw:
                    misses.append(f"{name} {metric}: raw p95 {raw:.4f} s, Prometheus {estimate}")
        assert compared >= 2 and misses == [], misses
    finally:
        prometheus.stop()
        endpoint.stop()
