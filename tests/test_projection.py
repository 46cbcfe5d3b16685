"""The projection model reproduces the study from its inputs, and behaves on hand-checked cases."""

from __future__ import annotations

import math

import pandas as pd
import pytest
from hypothesis import given
from hypothesis import strategies as st

from rtax.planning import projection, published
from rtax.planning.projection import Crossover


@pytest.mark.parametrize("scenario", published.SCENARIOS, ids=lambda s: s.name)
def test_scenarios_reproduce_the_published_hours(scenario: published.Scenario) -> None:
    assert round(projection.scenario_hours(scenario)) == scenario.published_hours


def test_table_1_exactly() -> None:
    assert projection.worker_hours(1.0, 1_000_000) == pytest.approx(277.78, abs=0.01)
    assert projection.worker_hours(0.010 * 150, 1_000_000) == pytest.approx(416.67, abs=0.01)
    assert projection.worker_hours(0.100 * 150, 1_000_000) == pytest.approx(4166.67, abs=0.01)


@given(st.floats(0.001, 1e4), st.integers(1, 10**7), st.integers(2, 50))
def test_worker_hours_scale_linearly(seconds: float, count: int, k: int) -> None:
    one = projection.worker_hours(seconds, count)
    assert projection.worker_hours(seconds, count * k) == pytest.approx(one * k)
    assert projection.worker_hours(seconds * k, count) == pytest.approx(one * k)


def test_project_table() -> None:
    table = projection.project(
        {"a": 36.0, "b": 18.0}, trajectories=10_000, workers=100, prices={"b": 2.0}
    )
    assert list(table["substrate"]) == ["b", "a"]  # best first
    assert list(table["worker_hours"]) == pytest.approx([50.0, 100.0])
    assert list(table["extra_hours"]) == pytest.approx([0.0, 50.0])
    assert list(table["ratio_to_best"]) == pytest.approx([1.0, 2.0])
    assert list(table["wall_clock_hours"]) == pytest.approx([0.5, 1.0])
    assert table["cost"].iloc[0] == pytest.approx(100.0)
    assert math.isnan(table["cost"].iloc[1])  # no price given: no cost invented
    assert projection.project({}, trajectories=1).empty
    with pytest.raises(ValueError):
        projection.project({"a": 1.0}, trajectories=1, workers=0)


def test_spread() -> None:
    assert projection.spread([2.0, 10.0, 4.0]) == 5.0
    assert projection.spread([3.0, math.nan, 0.0]) == 1.0  # NaN and zero don't count
    assert math.isnan(projection.spread([]))


def test_crossovers_hand_checked() -> None:
    # a: 10 s fixed + 1 s/action; b: 2 s fixed + 2 s/action -> equal at S = 8 (18 s).
    lines = {"a": (10.0, 1.0), "b": (2.0, 2.0), "c": (5.0, 1.0)}
    found = projection.crossovers(lines)
    assert Crossover("b", "a", 8.0, 18.0) in found
    assert Crossover("b", "c", 3.0, 8.0) in found
    assert not any({x.cheaper_short, x.cheaper_long} == {"a", "c"} for x in found)  # parallel
    assert [x.steps for x in found] == sorted(x.steps for x in found)
    assert projection.crossovers({"a": (1.0, 1.0), "b": (2.0, 2.0)}) == []  # b never wins


def _runs(rows: list[tuple[str, int, float, str]]) -> pd.DataFrame:
    return pd.DataFrame(rows, columns=["substrate", "steps", "episode_s", "status"])


def test_estimates_measured_fitted_and_lacking() -> None:
    runs = _runs(
        [
            ("fit", 10, 7.0, "ok"),
            ("fit", 10, 7.0, "ok"),
            ("fit", 150, 77.0, "ok"),
            ("fit", 150, 1e6, "failed"),  # failures never count
            ("exact", 50, 20.0, "ok"),
            ("exact", 50, 30.0, "ok"),
            ("one", 10, 5.0, "ok"),
            ("none", 0, 1.0, "ok"),
        ]
    )
    found, lacking = projection.estimates(runs, steps=50, which="p50")
    assert found["fit"].seconds == pytest.approx(2.0 + 0.5 * 50)
    assert found["fit"].basis.startswith("what-if: fitted p50 over S=10,150")
    assert (found["fit"].fixed_s, found["fit"].per_action_s) == pytest.approx((2.0, 0.5))
    assert found["exact"].seconds == 25.0 and found["exact"].n == 2
    assert found["exact"].basis == "what-if: measured p50 at S=50"
    assert set(lacking) == {"one", "none"}
    assert "two lengths" in lacking["one"]
    p95, _ = projection.estimates(runs, steps=50, which="p95")
    assert p95["exact"].seconds == pytest.approx(29.5)
    with pytest.raises(ValueError):
        projection.estimates(runs, steps=50, which="p42")


def test_totals_use_the_mean_by_default_and_p50_is_a_named_what_if() -> None:
    """Samples [1, 1, 1, 10] s: 1,000 rollouts take 1,000 x 3.25 = 3,250 s in total; 1,000 x p50
    (1 s) = 1,000 s would under-state it by more than 3x."""
    runs = _runs([("skewed", 50, t, "ok") for t in (1.0, 1.0, 1.0, 10.0)])
    found, _ = projection.estimates(runs, steps=50)  # the default statistic
    assert found["skewed"].seconds == 3.25
    assert found["skewed"].basis == "measured mean at S=50"  # no what-if label on the total
    total = projection.project({"skewed": found["skewed"].seconds}, trajectories=1_000)
    assert total["worker_hours"].iloc[0] * 3600 == pytest.approx(3_250.0)
    what_if, _ = projection.estimates(runs, steps=50, which="p50")
    assert what_if["skewed"].basis.startswith("what-if")
    p50_total = projection.project({"skewed": what_if["skewed"].seconds}, trajectories=1_000)
    assert p50_total["worker_hours"].iloc[0] * 3600 == pytest.approx(1_000.0)
    assert projection.STATISTICS[0] == projection.TOTAL == "mean"
    assert "what if" in projection.LABELS["p50"] and "what if" in projection.LABELS["p95"]


def test_fitted_total_goes_through_the_per_length_means() -> None:
    # S=10: [2, 2, 8] s (mean 4, p50 2); S=110: [12, 12, 18] s (mean 14): line 3 + 0.1 S.
    runs = _runs(
        [("s", 10, t, "ok") for t in (2.0, 2.0, 8.0)]
        + [("s", 110, t, "ok") for t in (12.0, 12.0, 18.0)]
    )
    found, _ = projection.estimates(runs, steps=60)
    assert found["s"].seconds == pytest.approx(3.0 + 0.1 * 60)
    assert (found["s"].fixed_s, found["s"].per_action_s) == pytest.approx((3.0, 0.1))
    assert found["s"].basis == "fitted mean over S=10,110"
