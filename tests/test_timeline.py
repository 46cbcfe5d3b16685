"""The Timeline's points (rtax.analysis.timeline) and their reader: percentiles per bucket worked
out by hand, the summaries' hourly points equal to the raw path on the same samples, folded and raw
history as one history (every rollout counted once), failures per bucket, incidents as spans."""

from __future__ import annotations

import math
from datetime import UTC, datetime, timedelta
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest

from factories import make_record
from rtax.analysis import overlays, stats, status, timeline
from rtax.analysis.maintenance import Window
from rtax.core.series import Selector, Series
from rtax.dashboard import data, figures
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


def test_a_bucket_with_enough_samples_shows_p99_and_its_interval_raw_and_summarized(
    store: Store,
) -> None:
    """400 samples in one hour: p99 is reported (n >= stats.P99_MIN_N) with the
    order-statistic interval, the raw and the summarized points agree (the sketch is within 1 %
    beyond 256 samples), and the chart draws p99 dotted with the interval in its hover; an
    hour of 60 samples says nothing about p99."""
    values = [0.1 + 0.001 * ((i * 37) % 400) for i in range(400)]
    for i, v in enumerate(values):
        _save(store, f"r{i}", T0 + timedelta(seconds=8 * i), v)
    for i in range(60):
        _save(store, f"s{i}", T0 + timedelta(hours=1, seconds=30 * i), 0.2)
    raw = timeline.from_runs(_runs(store), "time_to_first_command_s", 3600)
    rows = store.summaries.buckets("hour", metrics=["time_to_first_command_s"])
    summed = timeline.from_summaries(rows, "time_to_first_command_s", "hour")
    full, few = raw.iloc[0], raw.iloc[1]
    ordered = sorted(values)
    lo, hi = stats.interval_ranks(99, 400)
    assert full["p99"] == pytest.approx(float(np.percentile(ordered, 99)))
    assert (full["p99_lo"], full["p99_hi"]) == (ordered[lo], ordered[hi])
    assert full["p95_lo"] <= full["p95"] <= full["p95_hi"]
    assert math.isnan(few["p99"]) and math.isnan(few["p99_lo"])  # n=60: "n too small"
    for column in ("p99", "p99_lo", "p99_hi", "p95_lo", "p95_hi"):
        assert summed.iloc[0][column] == pytest.approx(full[column], rel=0.02), column
    fig = figures.timeline(raw, [], "time_to_first_command_s")
    p99 = next(t for t in fig.data if t.name.endswith("p99"))
    assert p99.line.dash == "dot"
    assert "95 % interval" in p99.customdata[0][5] and p99.customdata[1][5] == ""


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
    spans = overlays.spans(incidents, {"docker T0 S=0 exec real": "docker · T0"}, now)
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


def _points(*starts: datetime) -> pd.DataFrame:
    return pd.DataFrame({"bucket_start": [pd.Timestamp(t) for t in starts]})


def test_the_axis_spans_the_window_in_view_never_a_millisecond() -> None:
    """A new install: one five-minute bucket (10:00), opened at 10:03. All time is the data's
    span but at least 12 buckets: 09:03 to 10:03, the point at the right. A window is the
    window (the last 24 hours), widened only to hold a bucket that began before its edge."""
    now = pd.Timestamp(T0 + timedelta(minutes=3))
    one = _points(T0)
    assert timeline.x_range(one, None, 300, now) == (now - pd.Timedelta(hours=1), now)
    assert timeline.x_range(one, 86_400, 300, now) == (now - pd.Timedelta(days=1), now)
    # all time over two days of data: from the first point
    old = _points(T0 - timedelta(days=2), T0)
    assert timeline.x_range(old, None, 3_600, now)[0] == pd.Timestamp(T0 - timedelta(days=2))
    # the last hour in daily buckets: today's bucket began at midnight, before the window
    day = _points(T0.replace(hour=0))
    assert timeline.x_range(day, 3_600, 86_400, now)[0] == pd.Timestamp(T0.replace(hour=0))
    assert timeline.x_range(_points(), None, 300, now) == (now - pd.Timedelta(hours=1), now)


def _series(substrate: str, tier: str = "T0") -> Series:
    return Series(substrate, fidelity="real", tier=tier)


def test_the_default_series_are_the_few_that_need_attention_worst_first() -> None:
    """By the board's state (down, degraded, unknown, stale, then up), then open incidents,
    then the newest change; at most a handful, the rest left to the list."""
    names = ["a", "b", "c", "d", "e", "f", "g"]
    known = {s.key: s for s in (_series(n) for n in names)}
    key = {n: _series(n).key for n in names}
    board = [SimpleNamespace(key=key[n], state=st) for n, st in
             [("a", "up"), ("b", "stale"), ("c", "degraded"), ("d", "down"), ("e", "unknown"),
              ("f", "degraded"), ("g", "up")]]  # fmt: skip
    incidents = pd.DataFrame(
        [
            {"series": key["f"], "state": "open", "start": "2026-06-01T09:00:00+00:00"},
            {"series": key["c"], "state": "resolved", "start": "2026-06-01T11:00:00+00:00"},
            {"series": key["g"], "state": "open", "start": "2026-06-01T08:00:00+00:00"},
        ]
    )
    ranking = timeline.ranked(known, board, incidents)
    assert ranking == [
        (key["d"], "down"),
        (key["f"], "degraded, 1 open incident"),  # degraded with an incident before c
        (key["c"], "degraded"),
        (key["e"], "unknown"),
        (key["b"], "stale"),
        (key["g"], "1 open incident"),  # up, but an incident is open
        (key["a"], ""),
    ]
    assert timeline.default_series(ranking) == [key[n] for n in "dfceb"]
    assert timeline.selection_note(ranking, timeline.default_series(ranking), known) == (
        "By default the 5 of 6 series that need attention, worst first: d · T0 (down); f · T0 "
        "(degraded, 1 open incident); c · T0 (degraded); e · T0 (unknown); b · T0 (stale); 2 "
        "more under Series."
    )


def test_with_nothing_to_look_at_the_default_is_the_most_recently_changed() -> None:
    names = ["a", "b", "c", "d", "e", "f", "g"]
    known = {s.key: s for s in (_series(n) for n in names)}
    board = [SimpleNamespace(key=k, state="up") for k in known]
    changed = pd.DataFrame(
        [{"series": _series("f").key, "state": "resolved", "start": "2026-06-01T09:00:00+00:00"}]
    )
    ranking = timeline.ranked(known, board, changed)
    chosen = timeline.default_series(ranking)
    assert chosen == [_series(n).key for n in "fabcd"]
    assert timeline.selection_note(ranking, chosen, known) == (
        "No series needs attention (every one up, no incident open): by default the first 5, "
        "the most recently changed first; 2 more under Series."
    )
    # a series off the board (not probed this week) comes after every one on it
    off = timeline.ranked(known, board[1:], pd.DataFrame())
    assert off[-1] == (_series("a").key, "")


def test_maintenance_windows_become_bands_over_the_series_they_cover() -> None:
    """A window over docker covers the docker series shown, clipped to the axis; one over
    podman only, or outside the axis, is not drawn."""
    start, end = pd.Timestamp(T0), pd.Timestamp(T0 + timedelta(hours=2))
    shown = {s.key: s for s in (_series("docker"), _series("local"))}
    docker = Selector(substrate=("docker",))
    windows = [
        Window(docker, T0 - timedelta(hours=1), T0 + timedelta(minutes=30), "registry migration"),
        Window(Selector(substrate=("podman",)), T0, T0 + timedelta(hours=1), "podman only"),
        Window(Selector(), T0 + timedelta(hours=3), T0 + timedelta(hours=4), "later", "#2"),
    ]
    (band,) = overlays.bands(windows, shown, start, end)
    assert (band["start"], band["end"]) == (start, pd.Timestamp(T0 + timedelta(minutes=30)))
    assert band["text"] == "maintenance: registry migration"
    assert band["detail"] == (
        "registry migration (substrate docker, 2026-06-01 09:00 → 2026-06-01 10:30 UTC); covers "
        "docker · T0; from [[maintenance]]"
    )


def test_an_accepted_baseline_is_drawn_apart_from_a_recovery() -> None:
    """Resolved as baseline: a span to where the new level was accepted, marked there;
    recovered: a grey span, no mark; acknowledged: its own kind, with who said what."""
    key = "docker T0 S=0 exec real"
    rows = [
        {"id": 1, "state": "resolved", "resolution": "baseline",
         "end": "2026-06-01T11:00:00+00:00",
         "detail": "p50 0.3 s -> 0.6 s; accepted as the new baseline after 100 samples"},
        {"id": 2, "state": "resolved", "resolution": "recovered",
         "end": "2026-06-01T10:30:00+00:00", "detail": "p50 0.3 s -> 0.9 s"},
        {"id": 3, "state": "open", "acknowledged_at": "2026-06-01T11:10:00+00:00",
         "acknowledged_note": "looking", "maintenance": "image rebuild (...)", "end": None,
         "detail": "success 100% -> 50%"},
    ]  # fmt: skip
    incidents = pd.DataFrame(
        [{"series": key, "metric": "time_to_first_command", "start": T0.isoformat(), **r}
         for r in rows]
    )  # fmt: skip
    now = pd.Timestamp(T0 + timedelta(hours=2))
    baseline, recovered, acknowledged = overlays.spans(incidents, {key: "docker · T0"}, now)
    assert (baseline["kind"], baseline["text"]) == ("baseline", "incident #1 · resolved: baseline")
    assert baseline["accepted"] == baseline["end"] == pd.Timestamp(T0 + timedelta(hours=1))
    assert (recovered["kind"], recovered["accepted"]) == ("resolved", None)
    assert recovered["text"] == "incident #2 · resolved: recovered"
    assert acknowledged["kind"] == "acknowledged" and acknowledged["end"] == now
    assert acknowledged["text"] == "incident #3 · acknowledged"
    assert acknowledged["detail"] == (
        "success 100% -> 50%; acknowledged 2026-06-01 11:10 UTC: looking; in maintenance: "
        "image rebuild (...) (alerts silenced)"
    )


def test_labels_stay_on_the_chart() -> None:
    """Over an axis from 10:00 to 12:00: a span over before it is not drawn; one begun before
    it is labelled at the axis' start; one begun in the last fifth (after 11:36) is anchored by
    its label's right edge, so the text reads leftwards, on the chart."""
    axis = (pd.Timestamp(T0), pd.Timestamp(T0 + timedelta(hours=2)))

    def mark(start: float, end: float) -> dict:
        return {"start": axis[0] + pd.Timedelta(minutes=start),
                "end": axis[0] + pd.Timedelta(minutes=end)}  # fmt: skip

    shown = overlays.placed([mark(-90, -30), mark(-30, 30), mark(60, 90), mark(100, 120)], axis)
    assert [(m["label_at"], m["anchor"]) for m in shown] == [
        (axis[0], "left"),
        (axis[0] + pd.Timedelta(minutes=60), "left"),
        (axis[0] + pd.Timedelta(minutes=100), "right"),
    ]
