"""The Timeline's points (rtax.analysis.timeline) and their reader: percentiles per bucket worked
out by hand, the summaries' hourly points equal to the raw path on the same samples, folded and raw
history as one history (every rollout counted once), failures per bucket, incidents as spans."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pandas as pd
import pytest

from factories import make_record
from rtax.analysis import status, timeline
from rtax.dashboard import data
from rtax.store import Store, retention

T0 = datetime(2026, 6, 1, 10, 0, tzinfo=UTC)


def _save(store: Store, run_id: str, at: datetime, ttfc: float | None, **kw) -> None:
    failed = ttfc is None
    store.save_rollout(
        make_record(
            run_id,
            substrate=kw.pop("substrate", "docker"),
            kind="docker",
            started_at=at.isoformat(timespec="microseconds"),
            time_to_first_command_s=ttfc,
            status="failed" if failed else "ok",
            error_class=kw.pop("error_class", "exec_error") if failed else None,
            **kw,
        )
    )


def _runs(store: Store) -> pd.DataFrame:
    columns = [*status.SERIES, "started_at", "status", "error_class", "time_to_first_command_s"]
    return store.runs.read(columns=columns)


def test_five_minute_points_by_hand(store: Store) -> None:
    # 10:00-10:05: 0.1, 0.2, 0.3, 0.4 and one failure; 10:05-10:10: 1.0 and a harness error
    for i, v in enumerate([0.1, 0.2, 0.3, 0.4]):
        _save(store, f"a{i}", T0 + timedelta(seconds=30 * i), v)
    _save(store, "f", T0 + timedelta(minutes=3), None)
    _save(store, "b", T0 + timedelta(minutes=6), 1.0)
    _save(store, "h", T0 + timedelta(minutes=7), None, error_class="harness_error")
    points = timeline.from_runs(_runs(store), "time_to_first_command_s", 300)
    assert list(points["bucket_start"]) == [
        pd.Timestamp(T0),
        pd.Timestamp(T0 + timedelta(minutes=5)),
    ]
    first, second = points.iloc[0], points.iloc[1]
    assert first["series"] == "docker · T0" and first["key"] == "docker T0 S=0 exec real"
    assert (first["runs"], first["ok"], first["failures"], first["n"]) == (5, 4, 1, 4)
    assert first["p50"] == pytest.approx(0.25) and first["p95"] == pytest.approx(0.385)
    assert first["success_rate"] == pytest.approx(0.8)
    assert first["errors"] == '{"exec_error": 1}'
    # the harness error is kept apart: it never lowers success
    assert (second["runs"], second["harness_errors"], second["success_rate"]) == (1, 1, 1.0)
    assert second["bucket_end"] - second["bucket_start"] == pd.Timedelta(minutes=5)


def test_hourly_summary_points_equal_the_raw_path(store: Store) -> None:
    """The same samples two ways: np.percentile over raw runs in hour buckets, and the
    summaries' sketches (exact up to their limit) merged per hour."""
    values = [0.05 * (1 + (i * 7) % 13) for i in range(60)]
    for i, v in enumerate(values):
        _save(store, f"r{i}", T0 + timedelta(minutes=2 * i), v if i % 11 else None)
    raw = timeline.from_runs(_runs(store), "time_to_first_command_s", 3600)
    rows = store.summaries.buckets("hour", metrics=["time_to_first_command_s"])
    summed = timeline.from_summaries(rows, "time_to_first_command_s", "hour")
    assert len(raw) == len(summed) == 2
    for column in ("runs", "ok", "failures", "n"):
        assert list(raw[column]) == list(summed[column]), column
    for column in ("p50", "p95", "success_rate"):
        assert list(summed[column]) == pytest.approx(list(raw[column])), column
    assert list(summed["bucket_start"]) == list(raw["bucket_start"])


def test_folded_and_raw_history_make_one_timeline(db_path: Path) -> None:
    """Runs over three days, the older two folded by retention: the five-minute view reads
    the hourly summaries before the oldest raw run and raw points after it, counting every
    rollout once; the hourly view covers both from the summaries alone."""
    now = datetime.now(UTC).replace(minute=0, second=0, microsecond=0)
    with Store(db_path) as store:
        for i in range(72):  # one an hour, three days
            _save(store, f"r{i}", now - timedelta(hours=71 - i, minutes=-10), 0.1 + 0.01 * i)
        report = retention.fold(store, older_than_days=1.0, pause_s=0.0, compact=False)
        assert report.runs > 0
        left = store.runs.count()
    data.st.cache_data.clear()
    key = (None, (), (), (), ())
    fine = data.timeline_points.__wrapped__(str(db_path), key, "time_to_first_command_s", "5 min")
    assert int(fine["runs"].sum()) == 72
    assert (fine["source"] == "raw").sum() == left
    assert set(fine["source"]) == {"raw", "summary (hour)"}
    hourly = data.timeline_points.__wrapped__(str(db_path), key, "time_to_first_command_s", "1 h")
    assert int(hourly["runs"].sum()) == 72 and len(hourly) == 72
    daily = data.timeline_points.__wrapped__(str(db_path), key, "time_to_first_command_s", "1 d")
    assert int(daily["runs"].sum()) == 72


def test_incidents_become_spans_of_the_series_shown() -> None:
    now = pd.Timestamp(T0 + timedelta(hours=2))
    incidents = pd.DataFrame(
        [
            {"id": 1, "series": "docker T0 S=0 exec real", "metric": "time_to_first_command",
             "state": "resolved", "start": T0.isoformat(),
             "end": (T0 + timedelta(hours=1)).isoformat(), "detail": "x"},
            {"id": 2, "series": "docker T0 S=0 exec real", "metric": "episode", "state": "open",
             "start": (T0 + timedelta(hours=1)).isoformat(), "end": None, "detail": "y"},
            {"id": 3, "series": "local T0 S=0 exec real", "metric": "episode", "state": "open",
             "start": T0.isoformat(), "end": None, "detail": "z"},
        ]
    )  # fmt: skip
    spans = timeline.spans(incidents, {"docker T0 S=0 exec real": "docker · T0"}, now)
    assert [s["id"] for s in spans] == [1, 2]
    assert spans[0]["end"] == pd.Timestamp(T0 + timedelta(hours=1))
    assert spans[1]["end"] == now and spans[1]["text"] == "incident #2 · open"
    assert spans[0]["series"] == "docker · T0"


def test_default_bucket_keeps_points_readable() -> None:
    assert timeline.default_bucket(3600) == "5 min"
    assert timeline.default_bucket(7 * 86_400) == "1 h"
    assert timeline.default_bucket(90 * 86_400) == "1 d"


def test_engine_errors_are_rtax_own_and_never_lower_success(store: Store) -> None:
    """A node lost mid-rollout (``engine_error``, docs/ray.md#failures) is rtax's failure, kept
    apart like a harness error: one ok rollout and one engine error is 100 % success, n = 1."""
    _save(store, "ok", T0, 0.2)
    _save(store, "lost", T0 + timedelta(seconds=10), None, error_class="engine_error")
    raw = timeline.from_runs(_runs(store), "time_to_first_command_s", 300).iloc[0]
    rows = store.summaries.buckets("hour", metrics=["time_to_first_command_s"])
    summed = timeline.from_summaries(rows, "time_to_first_command_s", "hour").iloc[0]
    for point in (raw, summed):
        assert (point["runs"], point["harness_errors"], point["success_rate"]) == (1, 1, 1.0)
        assert point["errors"] == ""
