"""The envelope fit (rtax.analysis.envelope) against percentiles and breaks worked out by hand."""

from __future__ import annotations

import math

import pandas as pd
import pytest

from rtax.analysis.envelope import (
    ENVELOPE_COLUMNS,
    POINT_COLUMNS,
    cold_sweep,
    fit,
    points,
    saturation,
)
from rtax.settings.loads import Bounds

SERIES = {"substrate": "docker", "mode": "exec", "fidelity": "real", "tier": "T0", "steps": 0}
LOCAL = {**SERIES, "substrate": "local"}


def _load(load_id, concurrency, creates, status="complete", series=SERIES, cpu=0.1, lag=0.001):
    return {**series, "load_id": load_id, "concurrency": concurrency, "creates_per_s": creates,
            "status": status, "harness_cpu_cores": cpu, "dispatch_lag_p50_s": lag}  # fmt: skip


def _rollouts(load_id, ttfcs, failures=()):
    rows = [{"load_id": load_id, "status": "ok", "error_class": None,
             "time_to_first_command_s": t} for t in ttfcs]  # fmt: skip
    rows += [{"load_id": load_id, "status": "failed", "error_class": c,
              "time_to_first_command_s": None} for c in failures]  # fmt: skip
    return rows


@pytest.fixture
def measured() -> tuple[pd.DataFrame, pd.DataFrame]:
    loads = pd.DataFrame(
        [
            _load("a", 1, 2.0),
            _load("b", 10, 12.0),
            _load("c", 20, 9.0),
            _load("d", 20, 50.0, status="interrupted"),  # never counts
            _load("l1", 1, 4.0, series=LOCAL),
            _load("l2", 1, 6.0, series=LOCAL),
        ]
    )
    rollouts = pd.DataFrame(
        _rollouts("a", [1.0, 1.2, 1.4, 1.6, 1.8])
        + _rollouts("b", [1.5, 2.0, 2.5, 3.0, 3.5], ["harness_error"])
        + _rollouts("c", [2.0, 3.0, 4.0, 5.0], ["rate_limited"])
        + _rollouts("d", [99.0] * 3)
        + _rollouts("l1", [0.1, 0.2])
        + _rollouts("l2", [0.3])
    )
    return loads, rollouts


def test_points_pool_complete_load_runs_per_concurrency(measured) -> None:
    table = points(*measured)
    assert list(table.columns) == list(POINT_COLUMNS)
    docker = table[table["substrate"] == "docker"].set_index("concurrency")
    assert list(docker.index) == [1, 10, 20]  # the interrupted run added nothing
    # p95 of [1.0 .. 1.8]: rank 0.95 * 4 = 3.8 -> 1.6 + 0.8 * 0.2
    assert docker.loc[1, "ttfc_p95_s"] == pytest.approx(1.76)
    assert docker.loc[1, "ttfc_p50_s"] == pytest.approx(1.4)
    # a harness error is rtax's, not the substrate's: 0 of 5 attempts failed
    assert docker.loc[10, "runs"] == 5 and docker.loc[10, "failed"] == 0
    assert docker.loc[10, "ttfc_p95_s"] == pytest.approx(3.4)  # 3.0 + 0.8 * 0.5
    # [2, 3, 4, 5]: rank 0.95 * 3 = 2.85 -> 4 + 0.85 * 1; one failure in five
    assert docker.loc[20, "ttfc_p95_s"] == pytest.approx(4.85)
    assert docker.loc[20, "failure_rate"] == pytest.approx(0.2)
    assert docker.loc[20, "n"] == 4
    local = table[table["substrate"] == "local"].iloc[0]
    assert local["loads"] == 2 and local["n"] == 3
    assert local["ttfc_p50_s"] == pytest.approx(0.2)
    assert local["creates_per_s"] == pytest.approx(5.0)  # the mean of 4 and 6


def test_the_ratio_bound_breaks_at_the_first_bad_point(measured) -> None:
    envelope = fit(points(*measured), Bounds()).set_index("substrate")
    assert list(envelope.columns) == [c for c in ENVELOPE_COLUMNS if c != "substrate"]
    docker = envelope.loc["docker"]
    assert docker["baseline_p95_s"] == pytest.approx(1.76)
    assert docker["p95_limit_s"] == pytest.approx(3.52)  # 2 x the lowest load's p95
    # by concurrency: 1 and 10 hold (3.4 <= 3.52, no substrate failure), 20 breaks both ways
    assert docker["held_concurrency"] == 10 and docker["break_concurrency"] == 20
    assert "TTFC p95 4.85 s > 3.52 s" in docker["broken_by"]
    assert "failures 20% > 5%" in docker["broken_by"]
    # by rate: 2/s holds, 9/s breaks, although 12/s (at concurrency 10) held
    assert docker["held_creates_per_s"] == 2.0 and docker["break_creates_per_s"] == 9.0
    local = envelope.loc["local"]  # one point, its own baseline: it can't break by ratio
    assert local["held_concurrency"] == 1 and math.isnan(local["break_concurrency"])
    assert local["broken_by"] == ""


def test_an_absolute_bound_tighter_than_the_ratio_wins(measured) -> None:
    envelope = fit(points(*measured), Bounds(ttfc_p95_max_s=3.0)).set_index("substrate")
    docker = envelope.loc["docker"]
    assert docker["p95_limit_s"] == 3.0
    assert docker["held_concurrency"] == 1 and docker["break_concurrency"] == 10
    assert docker["broken_by"] == "TTFC p95 3.4 s > 3 s"
    # the local series' p95 (0.29) is under 3 s
    assert math.isnan(envelope.loc["local", "break_concurrency"])


def test_a_first_point_that_breaks_held_nothing() -> None:
    loads = pd.DataFrame([_load("a", 5, 3.0), _load("b", 10, 6.0)])
    rollouts = pd.DataFrame(_rollouts("a", [1.0], ["create_failed"]) + _rollouts("b", [1.0, 1.0]))
    envelope = fit(points(loads, rollouts), Bounds(failure_rate_max=0.1)).iloc[0]
    assert math.isnan(envelope["held_concurrency"]) and envelope["break_concurrency"] == 5
    assert envelope["broken_by"] == "failures 50% > 10%"


def test_saturation_says_why() -> None:
    assert saturation(0.9, 0.001, 1.0) == "harness CPU 0.90 of a core"
    assert saturation(0.1, 0.05, 0.2) == "dispatch lag p50 50.0 ms"  # 50 ms > 10% of 200 ms
    assert saturation(0.1, 0.01, 0.2) == ""
    assert saturation(math.nan, None, math.nan) == ""
    loads = pd.DataFrame([_load("a", 1, 1.0, cpu=0.95)])
    table = points(loads, pd.DataFrame(_rollouts("a", [1.0])))
    assert table.iloc[0]["saturated"] == "harness CPU 0.95 of a core"
    assert fit(table).iloc[0]["saturated"] == "harness CPU 0.95 of a core"


def test_nothing_measured_is_empty() -> None:
    empty = points(pd.DataFrame(), pd.DataFrame())
    assert empty.empty and list(empty.columns) == list(POINT_COLUMNS)
    assert fit(empty).empty


def test_a_cold_sweep_is_one_substrates_successful_samples_per_concurrency(measured) -> None:
    """Complete load runs only ("d" was interrupted), successes only, one substrate: what the
    pool model draws a burst's refills from."""
    sweep = cold_sweep(*measured, substrate="docker", mode="exec", fidelity="real")
    assert sorted(sweep) == [1, 10, 20]
    assert sweep[1].tolist() == [1.0, 1.2, 1.4, 1.6, 1.8]
    assert sweep[10].tolist() == [1.5, 2.0, 2.5, 3.0, 3.5]
    assert sweep[20].tolist() == [2.0, 3.0, 4.0, 5.0]
    assert cold_sweep(*measured, substrate="local")[1].tolist() == [0.1, 0.2, 0.3]
    assert cold_sweep(*measured, substrate="podman") == {}
    with pytest.raises(ValueError, match="launch_type"):
        cold_sweep(*measured, launch_type="cold")
