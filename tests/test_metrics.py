"""The scheduler's Prometheus metrics (docs/metrics.md): what was stored, counted by status and
error class, ok rollouts only in the latency histograms, the last-probe gauges seeded from the
database on start, a registry per scheduler, and the shipped Grafana dashboard querying only
names the exposition has."""

from __future__ import annotations

import itertools
import json
import re
import urllib.request
from datetime import UTC, datetime
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

from factories import make_record
from polling import DEADLINE_S
from rtax.analysis.slo import Objective
from rtax.core.paths import checkout_root
from rtax.core.series import Selector
from rtax.service.prometheus import LATENCY_BUCKETS, NAMES, PHASE_BUCKETS, Metrics, serve
from rtax.service.scheduler import Scheduler
from rtax.settings import MetricsSettings, config
from rtax.store.database import Store

LOCAL = {
    "substrate": "local",
    "tier": "T0",
    "steps": "0",
    "mode": "exec",
    "fidelity": "real",
    "vantage": "local",
    "launch_type": "cold",
}
DASHBOARD = checkout_root() / "docs" / "grafana" / "rtax.json"


def _value(metrics: Metrics, name: str, **labels: str) -> float | None:
    return metrics.registry.get_sample_value(name, {**LOCAL, **labels})


def test_ok_rollouts_are_timed_failures_are_counted_apart_by_class() -> None:
    metrics = Metrics()
    metrics.observe(make_record("a", time_to_first_command_s=0.2, episode_s=0.5, ready_s=0.1))
    metrics.observe(make_record("b", time_to_first_command_s=3.0, episode_s=4.0))
    failed = dict(status="failed", time_to_first_command_s=0.3, episode_s=None)
    metrics.observe(make_record("c", error_class="ready_timeout", **failed))
    metrics.observe(make_record("d", error_class="harness_error", **failed))
    metrics.observe(make_record("e", error_class="engine_error", **failed))

    count = _value(metrics, "rtax_time_to_first_command_seconds_count")
    total = _value(metrics, "rtax_time_to_first_command_seconds_sum")
    assert (count, total) == (2, pytest.approx(3.2))  # the failed rollouts' 0.3 s: not in it
    assert _value(metrics, "rtax_episode_seconds_count") == 2
    above = min(b for b in LATENCY_BUCKETS if b >= 0.2)  # 0.210224: the 0.2 s one only
    assert _value(metrics, "rtax_time_to_first_command_seconds_bucket", le=repr(above)) == 1
    assert _value(metrics, "rtax_phase_seconds_sum", phase="ready") == pytest.approx(0.1 + 0.03)
    counted = {
        ("ok", "none"): 2,
        ("failed", "ready_timeout"): 1,
        ("harness_error", "harness_error"): 1,  # rtax's own trouble is no substrate failure
        ("harness_error", "engine_error"): 1,  # nor is its engine's (a Ray node lost)
    }
    for (status, cls), n in counted.items():
        assert _value(metrics, "rtax_rollouts_total", status=status, error_class=cls) == n


def test_each_scheduler_has_a_registry_of_its_own() -> None:
    first, second = Metrics(), Metrics()
    first.observe(make_record("a"))
    assert _value(first, "rtax_rollouts_total", status="ok", error_class="none") == 1
    assert _value(second, "rtax_rollouts_total", status="ok", error_class="none") is None


def test_series_labels_are_bounded_and_mode_is_the_stored_one() -> None:
    metrics = Metrics()
    metrics.observe(make_record("run-id-never-a-label", mode=None, steps=10, tier="T2"))
    text = _exposition(metrics)
    assert "run-id-never-a-label" not in text
    labels = {**LOCAL, "tier": "T2", "steps": "10", "mode": "exec"}
    assert metrics.registry.get_sample_value("rtax_episode_seconds_count", labels) == 1


def test_latency_buckets_are_eight_per_octave_from_a_millisecond_past_an_hour() -> None:
    """Each bucket spans at most 2^(1/8) (+ the rounding to six digits): a quantile interpolated
    inside one is within 9.05 % of the true value. The phases keep coarse buckets."""
    assert LATENCY_BUCKETS[0] == 0.001 and 3600 <= LATENCY_BUCKETS[-1] < 3600 * 2 ** (1 / 8)
    ratios = [b / a for a, b in itertools.pairwise(LATENCY_BUCKETS)]
    assert max(ratios) == pytest.approx(2 ** (1 / 8), rel=1e-5) and len(LATENCY_BUCKETS) == 176
    assert PHASE_BUCKETS[0] == 0.001 and PHASE_BUCKETS[-1] == 600
    assert list(PHASE_BUCKETS) == sorted(set(PHASE_BUCKETS))


def test_each_objective_counts_its_sli_events_per_series(tmp_path: Path) -> None:
    """Latency: ok rollouts only, good at or below the threshold; success: every rollout but
    rtax's own errors, good when ok; a series the selector leaves out is not counted; a series
    seen on start is seeded at zero; each objective's target is a gauge."""
    start = Objective("start", Selector(substrate=("local",)), "time_to_first_command", 0.99, 0.5)
    success = Objective("success", Selector(), "success_rate", 0.995)
    metrics = Metrics(objectives=(start, success))
    for i, (ttfc, cls) in enumerate(
        [(0.2, None), (0.5, None), (0.7, None), (None, "ready_timeout"), (None, "harness_error")]
    ):
        status = "ok" if cls is None else "failed"
        metrics.observe(make_record(f"r{i}", time_to_first_command_s=ttfc, status=status,
                                    error_class=cls))  # fmt: skip
    metrics.observe(make_record("d", substrate="docker", time_to_first_command_s=9.0))
    counted = {
        ("start", "rtax_slo_events_total"): 3,
        ("start", "rtax_slo_good_total"): 2,  # 0.2 and 0.5 (at the threshold)
        ("success", "rtax_slo_events_total"): 4,  # the harness error is none
        ("success", "rtax_slo_good_total"): 3,
    }
    for (name, metric), n in counted.items():
        assert _value(metrics, metric, slo=name) == n
    docker = {"substrate": "docker"}
    assert _value(metrics, "rtax_slo_events_total", slo="start", **docker) is None
    assert _value(metrics, "rtax_slo_good_total", slo="success", **docker) == 1
    assert metrics.registry.get_sample_value("rtax_slo_target_ratio", {"slo": "start"}) == 0.99

    db = tmp_path / "rtax.db"
    now = datetime.now(UTC).isoformat(timespec="microseconds")
    with Store(db) as store:
        store.save_rollout(make_record("seen", plan="p", started_at=now, ended_at=now))
        restarted = Metrics(objectives=(start,))
        restarted.seed(store)
    assert _value(restarted, "rtax_slo_events_total", slo="start") == 0
    assert _value(restarted, "rtax_slo_good_total", slo="start") == 0


def test_last_probe_age_is_read_at_scrape_and_seeded_from_the_database(tmp_path: Path) -> None:
    db = tmp_path / "rtax.db"
    now = datetime.now(UTC).timestamp()
    ended = datetime.fromtimestamp(now - 120, UTC).isoformat(timespec="microseconds")
    older = datetime.fromtimestamp(now - 900, UTC).isoformat(timespec="microseconds")
    newer = datetime.fromtimestamp(now - 10, UTC).isoformat(timespec="microseconds")
    with Store(db) as store:
        store.save_rollout(make_record("new", plan="p", started_at=ended, ended_at=ended))
        store.save_rollout(make_record("old", plan="p", started_at=older, ended_at=older))
        store.save_rollout(
            make_record(
                "gone",
                plan="p",
                substrate="docker",
                status="failed",
                error_class="create_failed",
                started_at=older,
                ended_at=older,
            )
        )
        # `rtax probe --db` on the same database: not the scheduler's, not its last probe
        store.save_rollout(make_record("by-hand", plan=None, started_at=newer, ended_at=newer))
    clock = [now]
    metrics = Metrics(clock=lambda: clock[0])  # a restarted scheduler, before any rollout
    with Store(db) as store:
        assert metrics.seed(store) == 3
    assert _value(metrics, "rtax_last_probe_timestamp_seconds") == pytest.approx(now - 120)
    assert _value(metrics, "rtax_last_probe_age_seconds") == pytest.approx(120)
    failing = {"substrate": "docker"}
    assert _value(metrics, "rtax_last_probe_age_seconds", **failing) == pytest.approx(900)
    clock[0] += 60  # no new rollout: the age grows between scrapes
    assert _value(metrics, "rtax_last_probe_age_seconds") == pytest.approx(180)
    # The seeded series exist at zero (so `rate` sees their first increment), not at history.
    assert _value(metrics, "rtax_rollouts_total", status="ok", error_class="none") == 0
    gone = {**failing, "status": "failed", "error_class": "create_failed"}
    assert _value(metrics, "rtax_rollouts_total", **gone) == 0
    assert _value(metrics, "rtax_time_to_first_command_seconds_count") == 0


def test_a_spooled_record_counts_when_it_is_written_not_before(tmp_path: Path) -> None:
    conf = _config(tmp_path, enabled=False)
    scheduler = Scheduler(conf)
    conf.database.mkdir()  # the database is unavailable
    scheduler.save(make_record("first"))
    ok = {"status": "ok", "error_class": "none"}
    assert _value(scheduler.metrics, "rtax_rollouts_total", **ok) is None  # spooled, not stored
    conf.database.rmdir()
    scheduler.save(make_record("second"))
    assert _value(scheduler.metrics, "rtax_rollouts_total", **ok) == 2


def test_a_failing_listener_never_spools_a_stored_record(tmp_path: Path) -> None:
    conf = _config(tmp_path, enabled=False)
    scheduler = Scheduler(conf)

    def broken(record: object) -> None:
        raise ValueError("a bug in the metrics")

    scheduler._spool.on_saved = broken
    scheduler.save(make_record("only"))
    assert not scheduler.spool.exists()
    with Store(conf.database) as store:
        assert store.runs.count() == 1


def test_serve_on_a_free_port_then_stop(tmp_path: Path) -> None:
    import logging

    metrics = Metrics()
    metrics.observe(make_record("a"))
    settings = MetricsSettings(enabled=True, address="127.0.0.1", port=0)
    endpoint = serve(metrics, settings, logging.getLogger("test"))
    assert endpoint is not None
    try:
        with urllib.request.urlopen(endpoint.url, timeout=DEADLINE_S) as response:
            text = response.read().decode()
        assert "rtax_rollouts_total{" in text
        # A taken port is said and skipped: the scheduler keeps probing without /metrics.
        taken = MetricsSettings(True, "127.0.0.1", endpoint.server.server_port)
        assert serve(metrics, taken, logging.getLogger("test")) is None
    finally:
        endpoint.stop()
    assert serve(metrics, MetricsSettings(enabled=False), logging.getLogger("t")) is None


def test_grafana_dashboard_parses_and_queries_only_exposed_names() -> None:
    board = json.loads(DASHBOARD.read_text())
    exprs = [t["expr"] for p in board["panels"] for t in p.get("targets", [])]
    assert len(exprs) >= 4
    metrics = Metrics(objectives=(Objective("s", Selector(), "success_rate", 0.99),))
    metrics.observe(make_record("a"))
    metrics.observe(make_record("b", status="failed", error_class="ready_timeout"))
    exposed = {
        s.name for f in text_string_to_metric_families(_exposition(metrics)) for s in f.samples
    }
    queried = {name for e in exprs for name in re.findall(r"\brtax_[a-z_]+", e)}
    assert queried and queried <= exposed, queried - exposed
    assert {n for n in NAMES} <= {re.sub(r"_(bucket|count|sum)$", "", n) for n in exposed}
    assert any("histogram_quantile(0.95" in e for e in exprs)
    assert any("histogram_quantile(0.5" in e for e in exprs)


def _exposition(metrics: Metrics) -> str:
    from prometheus_client import generate_latest

    return generate_latest(metrics.registry).decode()


def _config(tmp_path: Path, *, enabled: bool = True, extra: str = "") -> config.Config:
    file = tmp_path / "rtax.toml"
    file.write_text(f"""
database = "rtax.db"
[metrics]
enabled = {str(enabled).lower()}
port = 0
[[substrates]]
name = "local"
kind = "local"
{extra}
""")
    return config.load(file)
