"""Retention keeps percentiles: the sketch's accuracy, folding raw samples into rollups, and a
window spanning raw and rolled-up data answering like the raw samples did."""

from __future__ import annotations

import math
from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from factories import make_action, make_run
from rtax import retention
from rtax.probe import RolloutRecord
from rtax.sketch import ALPHA, Sketch
from rtax.store import Store

NOW = datetime(2026, 6, 1, tzinfo=UTC)


@given(st.lists(st.floats(1e-6, 1e4), min_size=1, max_size=300), st.floats(0, 100))
def test_sketch_is_within_alpha_of_the_nearest_rank(values: list[float], q: float) -> None:
    exact = float(np.percentile(values, q, method="lower"))
    assert Sketch.of(values).quantile(q) == pytest.approx(exact, rel=ALPHA * 1.0001)


@given(st.lists(st.floats(0, 100), max_size=50), st.lists(st.floats(0, 100), max_size=50))
def test_sketches_merge_like_their_union(a: list[float], b: list[float]) -> None:
    merged = Sketch.of(a).merge(Sketch.of(b))
    union = Sketch.of(a + b)
    assert (merged.counts, merged.zeros) == (union.counts, union.zeros)
    round_trip = Sketch.from_json(merged.to_json())
    assert (round_trip.counts, round_trip.zeros) == (union.counts, union.zeros)


def test_empty_and_zero() -> None:
    assert math.isnan(Sketch().quantile(50))
    assert Sketch.of([0.0, 0.0, 1.0]).quantile(50) == 0.0
    with pytest.raises(ValueError):
        Sketch.of([1.0]).quantile(101)


def _seed(db: Path, days: int = 60, per_day: int = 40) -> None:
    """Runs every ~36 min for `days` days; two series; lognormal episodes; a few failures."""
    rng = np.random.default_rng(7)
    with Store(db) as store:
        i = 0
        for day in range(days):
            for k in range(per_day):
                i += 1
                started = NOW - timedelta(days=day, minutes=k * 36)
                sub = "docker" if i % 2 else "local"
                failed = i % 23 == 0
                episode = float(rng.lognormal(np.log(0.3 if sub == "docker" else 0.02), 0.4))
                run = make_run(
                    f"r{i:06d}",
                    substrate=sub,
                    started_at=started.isoformat(),
                    episode_s=None if failed else episode,
                    status="failed" if failed else "ok",
                    error_class="action_timeout" if failed else None,
                )
                actions = [
                    make_action(
                        run["run_id"],
                        s,
                        "action",
                        command="x" * 200,
                        latency_s=float(rng.lognormal(np.log(0.01), 0.3)),
                    )
                    for s in range(5)
                ]
                store.save_rollout(RolloutRecord(run=run, actions=actions))


def _exact(store: Store) -> dict[str, tuple[float, float, int, int]]:
    runs = store.runs()
    out = {}
    for sub, group in runs.groupby("substrate"):
        ok = group[group["status"] == "ok"]["episode_s"]
        out[sub] = (np.percentile(ok, 50), np.percentile(ok, 95), len(ok), len(group))
    return out


def test_fold_keeps_percentiles_and_shrinks_the_file(tmp_path: Path) -> None:
    db = tmp_path / "r.db"
    _seed(db)
    with Store(db) as store:
        exact = _exact(store)
        before_runs = store.count("runs")
        report = retention.fold(store, older_than_days=30, bucket="day", now=NOW)
        assert 0 < report.runs < before_runs
        assert store.count("runs") == before_runs - report.runs  # raw past the age: gone
        assert report.bytes_after < report.bytes_before  # and the file shrank
        table = retention.window(store, "episode_s").set_index("substrate")
        for sub, (p50, p95, n, runs) in exact.items():
            assert table.loc[sub, "p50"] == pytest.approx(p50, rel=0.02)
            assert table.loc[sub, "p95"] == pytest.approx(p95, rel=0.02)
            assert table.loc[sub, "n"] == n and table.loc[sub, "runs"] == runs  # nothing lost
        # per-action latency survives too
        actions = retention.window(store, retention.ACTION_METRIC)
        assert actions["n"].sum() == 5 * sum(n for *_, n, _ in exact.values())


def test_fold_twice_merges_into_the_same_buckets(tmp_path: Path) -> None:
    db = tmp_path / "r.db"
    _seed(db, days=10, per_day=20)
    with Store(db) as store:
        exact = _exact(store)
        retention.fold(store, older_than_days=6, now=NOW, compact=False)
        retention.fold(store, older_than_days=2, now=NOW, compact=False)
        retention.fold(store, older_than_days=2, now=NOW, compact=False)  # nothing new: no-op
        table = retention.window(store, "episode_s").set_index("substrate")
        for sub, (_, _, n, runs) in exact.items():
            assert (table.loc[sub, "n"], table.loc[sub, "runs"]) == (n, runs)
        errors = store.rollups(metric="episode_s")["errors"]
        assert any("action_timeout" in e for e in errors)


def test_bucket_start() -> None:
    assert (
        retention.bucket_start("2026-01-02T13:45:10.5+00:00", "hour")
        == "2026-01-02T13:00:00.000000+00:00"
    )
    assert (
        retention.bucket_start("2026-01-02T13:45:10+00:00", "day")
        == "2026-01-02T00:00:00.000000+00:00"
    )
