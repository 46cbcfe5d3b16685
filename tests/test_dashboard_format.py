"""The dashboard's one formatting rule (docs/dashboard.md#formatting), checked as a reader sees
it: each table the pages draw, on a fixed frame written by hand, rendered to its exact headers
and cells (units, blanks, `n` beside its percentiles); the Styler the grid gets shows the same
strings; the status board, the footer, the snapshot's file name and the what-changed line."""

from __future__ import annotations

import math
from dataclasses import replace
from datetime import UTC, datetime

import pandas as pd
import pytest

from rtax.analysis import overlays, status
from rtax.dashboard import board, explore, filters, fleet, footer, format, style, tables
from rtax.planning import projection
from rtax.service import budget

NAN = math.nan


def _table(frame: pd.DataFrame) -> list[str]:
    """The table as a reader sees it: its header line, then a line per row, cells joined by
    " | " (a blank cell leaves nothing between its bars)."""
    shown = format.display(frame)
    return [" | ".join(shown.columns)] + [" | ".join(row) for row in shown.to_numpy().tolist()]


def _rows(frame: pd.DataFrame) -> list[list[str]]:
    return format.display(frame).to_numpy().tolist()


def test_durations_are_ms_below_a_second_then_s_with_three_significant_digits() -> None:
    cases = {
        0.0899: "89.9 ms",
        0.5: "500 ms",
        0.0000123: "0.0123 ms",
        0: "0 ms",
        0.99996: "1.00 s",  # rounds to a second: said in seconds, not "1,000 ms"
        1: "1.00 s",
        9.996: "10.0 s",
        66.2014: "66.2 s",
        1234.4: "1,234 s",  # never 1.23e+03
    }
    assert {v: format.duration(v) for v in cases} == cases
    for unknown in (None, NAN, pd.NA, pd.NaT):
        assert format.duration(unknown) == ""
    hours = [format.hours(h) for h in (4166.67, 277.78, 4.1666, 0.27778)]
    assert hours == ["4,167 h", "278 h", "4.17 h", "0.278 h"]
    ages = [format.age(s) for s in (None, 66.2, 600, 9_000, 200_000)]
    assert ages == ["never", "66 s ago", "10 min ago", "2.5 h ago", "2.3 d ago"]


def test_the_overview_table() -> None:
    """p99 with its interval where n allows it; where it doesn't, "n too small", not blank."""
    docker = {
        **{"series": "docker", "tier": "T0", "steps": 0, "fidelity": "real", "runs": 400},
        **{"success_rate": 0.75, "harness_errors": 0, "ttfc_p50_s": 0.0899, "ttfc_p95_s": 1.23},
        **{"ttfc_p99_s": 1.5, "ttfc_p99_lo_s": 1.3, "ttfc_p99_hi_s": 1.9, "ttfc_n": 300},
        **{"ttfc_res_s": NAN, "episode_p50_s": 66.2, "episode_p95_s": 1234.4},
        **{"episode_p99_s": NAN, "episode_n": 3, "episode_res_s": 0.49, "last_probe_age_s": 66.2},
    }
    k8s = {
        **{"series": "k8s [emulated]", "tier": "T2", "steps": 50, "fidelity": "emulated"},
        **{"runs": 1, "success_rate": 0.0, "harness_errors": 2, "ttfc_n": 0, "episode_n": 0},
        "last_probe_age_s": 2e5,
    }
    frame = pd.DataFrame([docker, k8s]).reindex(columns=list(tables.OVERVIEW_COLUMNS))
    assert _table(frame) == [
        "Series | Tier | Actions (S) | Fidelity | Runs | Success | Harness errors | "
        "First command n | First command p50 | First command p95 | First command p99 | "
        "First command p99 from (95 %) | First command p99 to (95 %) | "
        "First command resolution | Episode n | Episode p50 | Episode p95 | Episode p99 | "
        "Episode resolution | Last probe",
        "docker | T0 | 0 | real | 400 | 75.0% | 0 | 300 | 89.9 ms | 1.23 s | 1.50 s | 1.30 s | "
        "1.90 s |  | 3 | 66.2 s | 1,234 s | n too small | 490 ms | 66 s ago",
        "k8s [emulated] | T2 | 50 | emulated | 1 | 0.0% | 2 | 0 |  |  | n too small |  |  |  | "
        "0 |  |  | n too small |  | 2.3 d ago",
    ]


def test_the_cold_start_table_puts_n_beside_its_percentiles() -> None:
    frame = pd.DataFrame(
        {
            "series": ["local", "docker"],
            "fidelity": ["real", "real"],
            "runs": [2, 4],
            "n": [2, 3],
            "success_rate": [1.0, 0.75],
            "mean": [0.025, 0.325],
            "p50": [0.025, 0.31],
            "p95": [0.0295, 0.3456],
            "p99": [0.0299, 0.3491],
            "harness_errors": [0, 1],
            "res_s": [NAN, 0.25],
        }
    )
    assert _table(frame) == [
        "Series | Fidelity | Runs | Success | n | Mean | p50 | p95 | p99 | Harness errors | "
        "Resolution",
        "local | real | 2 | 100.0% | 2 | 25.0 ms | 25.0 ms | 29.5 ms | 29.9 ms | 0 | ",
        "docker | real | 4 | 75.0% | 3 | 325 ms | 310 ms | 346 ms | 349 ms | 1 | 250 ms",
    ]


def test_the_decomposition_and_amortization_tables() -> None:
    phases = pd.DataFrame(
        [["docker", "T2 S=50", "create", 3, 0.0123, 0.02, NAN, 0.0131, 1.0]],
        columns=[
            *("series", "workload", "phase", "n", "p50", "p95", "res_s"),
            "mean",
            "success_rate",
        ],
    )
    assert _table(phases) == [
        "Series | Workload | Phase | n | p50 | p95 | Resolution | Mean | Success",
        "docker | T2 S=50 | create | 3 | 12.3 ms | 20.0 ms |  | 13.1 ms | 100.0%",
    ]
    points = pd.DataFrame(
        [["docker", 150, 2, 2, 1.0, 8.4, NAN, 0.056]],
        columns=[
            *("series", "steps", "runs", "n", "success_rate", "seconds", "res_s"),
            "per_action_s",
        ],
    )
    assert _table(points) == [
        "Series | Actions (S) | Runs | Success | n | Trajectory time | Resolution | Per action",
        "docker | 150 | 2 | 100.0% | 2 | 8.40 s |  | 56.0 ms",
    ]
    fits = pd.DataFrame(
        [["docker", 0.9, 0.05, 6, 0.99873, "10,50,150"], ["local", NAN, NAN, 0, NAN, ""]],
        columns=["series", "fixed_s", "per_action_s", "n", "r2", "steps"],
    )
    assert _table(fits) == [
        "Series | Fixed | Per action | n | r² | Actions (S)",
        "docker | 900 ms | 50.0 ms | 6 | 0.999 | 10,50,150",
        "local |  |  | 0 |  | ",
    ]
    cross = pd.DataFrame(
        [["local", "docker", 11.6667, 1.5933]],
        columns=["faster_below", "faster_above", "crossover_steps", "seconds_at_crossover"],
    )
    assert _table(cross) == [
        "Faster below | Faster above | Crossover (actions) | Time at crossover",
        "local | docker | 11.7 | 1.59 s",
    ]


def test_the_projection_tables() -> None:
    # 1 M trajectories of 8.4 s and 16 s: 2,333.3 and 4,444.4 worker-hours, 2,111.1 extra,
    # 1.905x; on 1,000 workers 2.33 h and 4.44 h; $0.05/h x 2,333.3 h = $116.67
    table = projection.project(
        {"docker": 8.4, "local": 16.0},
        trajectories=1_000_000,
        workers=1_000,
        prices={"docker": 0.05},
    )
    table["basis"] = ["measured mean at S=150"] * 2
    table["n"] = [2, 1]
    assert _table(table) == [
        "Substrate | n | Per trajectory | Worker-hours | Extra hours | Ratio to best | "
        "Wall clock | Price | Cost | Basis",
        "docker | 2 | 8.40 s | 2,333 h | 0 h | 1.00× | 2.33 h | $0.05/h | $116.67 | "
        "measured mean at S=150",
        "local | 1 | 16.0 s | 4,444 h | 2,111 h | 1.90× | 4.44 h |  |  | measured mean at S=150",
    ]
    # +1 s per rollout x 1 M rollouts = 277.8 h, published as 278 h
    assert _table(tables.scenarios())[1].startswith(
        "+1 s per rollout, 1M rollouts | 1,000,000 | 0 | 1.00 s | 0 ms | 278 h | 278 h | "
    )


def test_the_fleet_plan_table() -> None:
    """The numbers of test_projection_turns_limits_and_prices_into_floor_billed_and_dollars
    (tests/test_dashboard.py), and a row that only says why it was not planned."""
    rows = [
        [
            *("docker", "real", 2, 10.0, 6.0, 1000 / 3600, "workers", 10_000 / 3600, 6_000 / 3600),
            *(0.6, 0.14 * 10_000 / 3600, 388.888, "per_instance_hour"),
        ],
        [
            *("ec2", "emulated", NAN, NAN, NAN, NAN, "a pool of 100 takes all 100 slots", NAN, NAN),
            *(NAN, NAN, NAN, None),
        ],
    ]
    assert _table(pd.DataFrame(rows, columns=list(fleet.PLAN_COLUMNS))) == [
        "Series | Fidelity | n | Wall (mean) | Actions (mean) | Wall-clock floor | "
        "Binding limit | Billed | Useful | Useful share | Dollars | "
        "Dollars per million trajectories | Prices unset",
        "docker | real | 2 | 10.0 s | 6.00 s | 0.278 h | workers | 2.78 h | 1.67 h | 60.0% | "
        "$0.39 | $388.89 | per_instance_hour",
        "ec2 | emulated |  |  |  |  | a pool of 100 takes all 100 slots |  |  |  |  |  | ",
    ]


def test_the_spend_table() -> None:
    rows = [
        ["kubernetes", "emulated", 2, 2, 3.0, 10, "budget used up: probing paused"],
        ["local", "real", 5, None, 0.02, None, "no budget"],
    ]
    assert _table(pd.DataFrame(rows, columns=list(budget.SPEND_COLUMNS))) == [
        "Substrate | Fidelity | Rollouts | Rollouts allowed per day | Environment time | "
        "Environment time allowed per day | Status",
        "kubernetes | emulated | 2 | 2 | 3.00 min | 10.0 min | budget used up: probing paused",
        "local | real | 5 |  | 0.0200 min |  | no budget",
    ]


def test_the_timeline_incidents_table_gives_each_metric_its_unit() -> None:
    """Each metric's before and after in its unit, and the lifecycle: the state as `rtax
    incidents` says it, why it was resolved, the note (the acknowledgement's while open) and
    the maintenance window it opened in."""
    key = "docker T0 S=0 exec real"
    incidents = pd.DataFrame(
        [
            {"id": 7, "series": key, "metric": "time_to_first_command", "state": "resolved",
             "start": "2026-06-01T11:00:00+00:00", "end": "2026-06-01T11:30:00+00:00",
             "before_p50": 0.2, "after_p50": 0.9, "magnitude": 4.5, "detail": "p50 up",
             "resolution": "baseline", "note": None, "acknowledged_at": None,
             "acknowledged_note": None, "maintenance": None},
            {"id": 8, "series": key, "metric": "success_rate", "state": "open",
             "start": "2026-06-01T11:00:00+00:00", "end": None, "before_p50": 0.95,
             "after_p50": 0.5, "magnitude": None, "detail": None, "resolution": None,
             "note": None, "acknowledged_at": "2026-06-01T11:05:00+00:00",
             "acknowledged_note": "on it", "maintenance": "image rebuild (every series, ...)"},
        ]
    )  # fmt: skip
    now = pd.Timestamp("2026-06-01T12:00:00Z")
    spans = overlays.spans(incidents, {key: "docker · T0"}, now)
    assert _table(overlays.incident_table(spans, incidents)) == [
        "Incident | Series | Metric | State | Start | End | p50 before | p50 after | "
        "Success before | Success after | Magnitude | Detail | Resolution | Note | Maintenance",
        # newest first; an open incident has no end yet
        "8 | docker · T0 | success_rate | acknowledged | 2026-06-01 11:00:00 UTC |  |  |  | "
        "95.0% | 50.0% |  |  |  | acknowledged: on it | image rebuild (every series, ...)",
        "7 | docker · T0 | time_to_first_command | resolved: baseline | 2026-06-01 11:00:00 UTC | "
        "2026-06-01 11:30:00 UTC | 200 ms | 900 ms |  |  | 4.50× | p50 up | baseline |  | ",
    ]


def test_the_raw_preview_formats_what_it_does_not_know_by_its_values() -> None:
    frame = pd.DataFrame(
        {
            "run_id": ["a"],
            "started_at": ["2026-06-01T11:00:00.123456+00:00"],
            "create_s": [0.0123],
            "seq": [1.0],
            "stdout_bytes": [2048.0],
            "error_class": [None],
            "creates_per_s": [4.567],
        }
    )
    assert _table(frame) == [
        "Run id | Started at | Create | Seq | Stdout bytes | Error class | Creates per second",
        "a | 2026-06-01 11:00:00 UTC | 12.3 ms | 1 | 2.00 KiB |  | 4.57 /s",
    ]


def _styler_cells(shown) -> list[list[str]]:
    """The display strings a Styler gives the grid (its first column is the index)."""
    lines = shown.to_string(delimiter="\t").splitlines()[1:]
    return [line.split("\t")[1:] for line in lines]


def test_the_grid_gets_the_same_strings_and_numbers_stay_numbers() -> None:
    frame = pd.DataFrame(
        {"series": ["docker", "local"], "p50": [0.31, 0.025], "n": [3, 2], "res_s": [0.25, NAN]}
    )
    shown = style.styled(frame)
    assert list(shown.data.columns) == ["series", "n", "p50", "res_s"]  # machine names kept
    assert shown.data["p50"].tolist() == [0.31, 0.025]  # sorts as numbers
    # a column with a blank holds its display strings: the grid draws a missing number "None"
    assert shown.data["res_s"].tolist() == ["250 ms", ""]
    assert _styler_cells(shown) == _rows(frame)
    big = pd.DataFrame({"p50": [0.5] * (style.STYLER_CELLS + 1)})
    assert set(style.styled(big)["p50"]) == {"500 ms"}  # past the Styler's budget: text


def test_the_status_board_card() -> None:
    card = status.Card(
        key="k",
        label="docker · T0",
        state="up",
        reasons=(),
        last_age_s=66.2014,
        runs_24h=40,
        success_24h=0.975,
        ttfc_n=39,
        ttfc_p50_s=0.0899,
        ttfc_p95_s=1.2,
        spark=(),
        open_incidents=(),
    )
    assert board.figures(card) == (
        "last probe 66 s ago  \nsuccess 97.5% of 40 (24 h)  \n"
        "first command p50 89.9 ms · p95 1.20 s · p99 n too small (n=39)"
    )
    more = replace(card, ttfc_n=400, ttfc_p99_s=2.5)  # from n = 100 (stats.P99_MIN_N)
    assert "p95 1.20 s · p99 2.50 s (n=400)" in board.figures(more)


def test_the_footer_line() -> None:
    now = datetime(2026, 6, 1, 12, 0, tzinfo=UTC)
    assert footer.line("/d/rtax.db", "2026-06-01T11:57:00+00:00", now, "1.2.3") == (
        "Database `/d/rtax.db` · newest run 2026-06-01 11:57:00 UTC (3 min ago) · rtax 1.2.3"
    )
    assert footer.line("/d/rtax.db", None, now, "1.2.3") == (
        "Database `/d/rtax.db` · no runs yet · rtax 1.2.3"
    )


def test_a_snapshot_is_named_by_its_table_and_filters() -> None:
    chosen = filters.Filters("last 24 hours", ("docker",), ("T2",))
    assert format.file_name("overview", chosen.parts()) == (
        "rtax-overview-last-24-hours-docker-T2.csv"
    )
    opted = filters.Filters(
        "all time", ("kubernetes [emulated]",), (), ("emulated",), include_incomparable=True
    )
    assert format.file_name("cold-start-T0", opted.parts()) == (
        "rtax-cold-start-T0-all-time-kubernetes-emulated-emulated-incomparable.csv"
    )


def test_log_sliders_step_1_2_3_5_per_decade() -> None:
    assert explore.log_values(1_000, 100_000_000)[:6] == [
        1_000,
        2_000,
        3_000,
        5_000,
        10_000,
        20_000,
    ]
    assert explore.log_values(1_000, 100_000_000)[-3:] == [30_000_000, 50_000_000, 100_000_000]
    assert len(explore.log_values(1_000, 100_000_000)) == 21  # 5 decades x 4 + the end
    assert explore.log_values(1, 10_000, zero=True)[:6] == [0, 1, 2, 3, 5, 10]
    prices = explore.log_values(0.01, 100.0, zero=True)
    assert prices[:4] == [0.0, 0.01, 0.02, 0.03] and all(isinstance(p, float) for p in prices)
    options = explore.log_values(1_000, 100_000_000)
    # log distance: 170 k is 0.53 from 100 k and 0.16 from 200 k
    assert explore.nearest(options, 170_000) == 200_000
    assert explore.nearest(options, 123_456) == 100_000
    assert explore.nearest(options, 1) == 1_000  # below the scale: its first value
    assert explore.nearest([0, 1, 2], 0) == 0


def test_what_changed_since_the_previous_setting() -> None:
    line = explore.what_changed(
        {"trajectories": "10 k", "actions": "150"},
        {"trajectories": "20 k", "actions": "150"},
        {"worker-hours": 1234.0},
        {"worker-hours": 2468.0},
    )
    assert line == "worker-hours 1,234 h → 2,468 h (+100%) since trajectories 10 k → 20 k"
    assert explore.what_changed({"a": "1"}, {"a": "1"}, {"x": 1.0}, {"x": 2.0}) is None
    unmoved = explore.what_changed({"a": "1"}, {"a": "2"}, {"x": 1.0, "y": 1.0}, {"x": 1.0})
    assert unmoved == "no figure moved since a 1 → 2"
    assert format.short(20_000) == "20 k" and format.short(1_234_567) == "1,234,567"


@pytest.mark.parametrize("value", [None, math.nan, pd.NaT])
def test_every_kind_leaves_an_unknown_value_blank(value) -> None:
    for write in (format.duration, format.hours, format.rate, format.count, format.number):
        assert write(value) == ""
    for write in (format.ratio, format.usd, format.minutes, format.stamp, format.text):
        assert write(value) == ""
