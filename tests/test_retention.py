"""Retention keeps percentiles: folding raw samples into rollups, and a window spanning raw and
rolled-up data answering like the raw samples did (exactly for small windows, within 1% for large
ones; the sketch itself is tested in test_sketch.py)."""

from __future__ import annotations

import sqlite3
import threading
from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np
import pytest

from factories import make_action, make_run
from polling import joined
from rtax.analysis.sketch import EXACT_LIMIT
from rtax.core.record import RolloutRecord
from rtax.store import Store, StoreError, retention

NOW = datetime(2026, 6, 1, tzinfo=UTC)


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
    runs = store.runs.read()
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
        before_runs = store.runs.count()
        report = retention.fold(store, older_than_days=30, bucket="day", now=NOW)
        assert 0 < report.runs < before_runs
        assert store.runs.count() == before_runs - report.runs  # raw past the age: gone
        assert report.bytes_after < report.bytes_before  # and the file shrank
        table = retention.window(store, "episode_s").set_index("substrate")
        for sub, (p50, p95, n, runs) in exact.items():
            assert n > EXACT_LIMIT  # so the rollups had to use buckets
            assert table.loc[sub, "p50"] == pytest.approx(p50, rel=0.01)
            assert table.loc[sub, "p95"] == pytest.approx(p95, rel=0.01)
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
        errors = store.rollups.read(metric="episode_s")["errors"]
        assert any("action_timeout" in e for e in errors)


def test_small_window_after_folding_is_exactly_the_raw_answer(tmp_path: Path) -> None:
    """History and fresh data agree on the same samples: a window of fewer than EXACT_LIMIT
    samples per group gives np.percentile's answer bit for bit, rolled up or not."""
    db = tmp_path / "r.db"
    _seed(db, days=3, per_day=20)
    with Store(db) as store:
        exact = _exact(store)
        report = retention.fold(store, older_than_days=1, now=NOW, compact=False)
        assert report.runs > 0 and store.runs.count() > 0  # both rolled up and raw
        table = retention.window(store, "episode_s").set_index("substrate")
        for sub, (p50, p95, n, _) in exact.items():
            assert n <= EXACT_LIMIT
            assert table.loc[sub, "p50"] == p50
            assert table.loc[sub, "p95"] == p95


def test_rollup_rows_written_before_exact_mode_still_read(tmp_path: Path) -> None:
    db = tmp_path / "r.db"
    _seed(db, days=2, per_day=4)
    with Store(db) as store:
        retention.fold(store, older_than_days=0, now=NOW, compact=False)
        # Rewrite every episode sketch as the bucket-only sketch stored them: all samples 2 s
        # (bucket 35) plus one zero.
        rows = store.rollups.read(metric="episode_s")
        store.db.conn.execute(
            "UPDATE rollups SET sketch = ? WHERE metric = 'episode_s'",
            ('{"35":3,"z":1}',),
        )
        table = retention.window(store, "episode_s")
        assert table["n"].sum() == rows["n"].sum()  # counts come from the row, not the sketch
        assert table["p95"].tolist() == pytest.approx([2.0] * len(table), rel=0.01)
        assert (table["p50"] > 0).all()


def test_bucket_start() -> None:
    assert (
        retention.bucket_start("2026-01-02T13:45:10.5+00:00", "hour")
        == "2026-01-02T13:00:00.000000+00:00"
    )
    assert (
        retention.bucket_start("2026-01-02T13:45:10+00:00", "day")
        == "2026-01-02T00:00:00.000000+00:00"
    )


def test_a_writer_with_a_short_busy_timeout_never_fails_during_retention(tmp_path: Path) -> None:
    """Issue 12: folding, freeing pages and checkpointing never hold the write lock past a
    writer's busy timeout, even while a dashboard reader holds a snapshot (which made the old
    ``wal_checkpoint(TRUNCATE)`` hold the lock for its whole 30 s wait)."""
    db = tmp_path / "r.db"
    _seed(db)
    reader = sqlite3.connect(db, isolation_level=None)  # a dashboard page mid-read
    reader.execute("BEGIN")
    reader.execute("SELECT count(*) FROM actions").fetchone()
    stop = threading.Event()
    written: list[str] = []
    failures: list[Exception] = []

    def write() -> None:
        with Store(db, busy_timeout_s=2.0) as store:
            while not stop.is_set():
                run_id = f"w{len(written) + len(failures):06d}"
                try:
                    run = make_run(run_id, started_at=NOW.isoformat())
                    store.save_rollout(RolloutRecord(run=run, actions=[]))
                    written.append(run_id)
                except StoreError as exc:
                    failures.append(exc)
                stop.wait(0.02)  # a writer's pace (a rollout finishing every few ms at most)

    writer = threading.Thread(target=write)
    writer.start()
    try:
        with Store(db) as store:
            before = len(written)
            report = retention.fold(store, older_than_days=30, bucket="day", now=NOW)
            during = len(written) - before
    finally:
        stop.set()
        joined(writer, "the writer")
        reader.execute("ROLLBACK")
        reader.close()
    assert report.runs > 1000
    assert failures == []
    assert during > 10  # the writer really wrote while maintenance ran
    with Store(db) as store:
        assert set(written) <= set(store.runs.read(columns=["run_id"])["run_id"])


def test_folding_keeps_two_vantages_two_series(tmp_path: Path) -> None:
    """One substrate seen from two vantages: folded, each keeps its own rollup and its own
    percentiles (docs/ray.md#vantages)."""
    db = tmp_path / "rtax.db"
    old = (NOW - timedelta(days=40)).isoformat()
    with Store(db) as store:
        for i, (vantage, episode) in enumerate([("eu", 1.0), ("eu", 3.0), ("us", 10.0)]):
            store.save_rollout(
                RolloutRecord(
                    run=make_run(f"r{i}", started_at=old, vantage=vantage, episode_s=episode),
                    actions=[make_action(f"r{i}", 0, "action")],
                )
            )
        retention.fold(store, older_than_days=30, now=NOW, pause_s=0)
        assert store.runs.count() == 0
        rows = store.rollups.read(metric="episode_s").set_index("vantage")
        assert rows.loc["eu", "runs"] == 2 and rows.loc["eu", "sum"] == pytest.approx(4.0)
        assert rows.loc["us", "runs"] == 1 and rows.loc["us", "sum"] == pytest.approx(10.0)
        table = retention.window(store, "episode_s").set_index("vantage")
        assert table.loc["eu", "p50"] == pytest.approx(2.0)  # (1 + 3) / 2, never with 10
        assert table.loc["us", "p50"] == pytest.approx(10.0)
