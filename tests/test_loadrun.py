"""The figures of one load run (rtax.analysis.loadrun) against timings worked out by hand."""

from __future__ import annotations

import json
import math

import pytest

from rtax.analysis.loadrun import Launch, figures, peak_in_flight, rate_limit_waits


def _run(status="ok", error_class=None, **timings) -> dict:
    return {"status": status, "error_class": error_class, "provenance": "{}", **timings}


WAIT = {"call": "create", "attempt": 1, "wait_s": 0.5}
WAITS = json.dumps({"rate_limit_waits": [WAIT, {**WAIT, "attempt": 2, "wait_s": 0.25}]})


def _burst_of_five() -> list[Launch]:
    """A burst due at 10.0: two ready, one refused at create, one never ready (rate limited
    twice on the way), one never started (not recorded)."""
    return [
        Launch(0, 10.0, 10.002, _run(create_s=0.1, orchestration_s=0.2,
                                     time_to_first_command_s=0.5, wall_s=1.0)),
        Launch(1, 10.0, 10.004, _run(create_s=0.3, orchestration_s=0.1,
                                     time_to_first_command_s=0.6, wall_s=1.2)),
        Launch(2, 10.0, 10.010, _run("failed", "create_failed", create_s=0.5, wall_s=0.6)),
        Launch(3, 10.0, 10.001, {**_run("failed", "ready_timeout", create_s=0.2,
                                        orchestration_s=0.3, wall_s=2.0), "provenance": WAITS}),
        Launch(4, 10.0, None, None),
    ]  # fmt: skip


def test_a_burst_with_failures_by_hand() -> None:
    got = figures(_burst_of_five(), start=10.0, planned=5, cpu_s=0.5)
    assert got["rollouts"] == 4 and got["ok"] == 2 and got["ready"] == 2
    # ready at 10.002 + 0.5 and 10.004 + 0.6; not all five were ready
    assert got["time_to_first_ready_s"] == pytest.approx(0.502)
    assert got["time_to_all_ready_s"] is None
    # three creates accepted (at 10.102, 10.304, 10.201); the first request went at 10.001
    assert got["creates_per_s"] == pytest.approx(3 / 0.303)
    # all four in flight over [10.010, 10.610]
    assert got["concurrency"] == 4
    # the last rollout ended at 10.001 + 2.0
    assert got["duration_s"] == pytest.approx(2.001)
    assert got["harness_cpu_s"] == 0.5
    assert got["harness_cpu_cores"] == pytest.approx(0.5 / 2.001)
    # lags 1, 2, 4, 10 ms: the median between 2 and 4
    assert got["dispatch_lag_p50_s"] == pytest.approx(0.003)
    assert got["dispatch_lag_max_s"] == pytest.approx(0.010)
    assert json.loads(got["failures"]) == {"create_failed": 1, "ready_timeout": 1}
    assert got["rate_limit_waits"] == 2
    assert got["rate_limit_wait_s"] == pytest.approx(0.75)


def test_all_ready_is_the_last_ready_when_every_rollout_got_there() -> None:
    launches = [
        Launch(0, 0.0, 0.0, _run(create_s=0.1, orchestration_s=0.1,
                                 time_to_first_command_s=0.3, wall_s=1.0)),
        Launch(1, 0.5, 0.6, _run(create_s=0.2, orchestration_s=0.1,
                                 time_to_first_command_s=0.4, wall_s=1.0)),
    ]  # fmt: skip
    got = figures(launches, start=0.0, planned=2, cpu_s=0.0, end=2.0)
    assert got["time_to_first_ready_s"] == pytest.approx(0.3)
    assert got["time_to_all_ready_s"] == pytest.approx(1.0)  # 0.6 + 0.4
    assert got["creates_per_s"] == pytest.approx(2 / 0.8)  # accepted at 0.1 and 0.8
    assert got["duration_s"] == 2.0  # the end given, not the last rollout's
    assert got["dispatch_lag_p50_s"] == pytest.approx(0.05)
    assert got["dispatch_lag_max_s"] == pytest.approx(0.1)
    assert json.loads(got["failures"]) == {}


def test_nothing_recorded_gives_empty_figures() -> None:
    got = figures([Launch(0, 0.0), Launch(1, 0.0)], start=0.0, planned=2, cpu_s=0.1, end=1.0)
    assert got["rollouts"] == 0 and got["concurrency"] == 0
    for key in ("creates_per_s", "time_to_first_ready_s", "time_to_all_ready_s"):
        assert got[key] is None
    assert got["dispatch_lag_p50_s"] is None
    assert got["harness_cpu_cores"] == pytest.approx(0.1)


def test_spans_that_touch_do_not_overlap() -> None:
    assert peak_in_flight([(0, 1), (1, 2), (2, 3)]) == 1
    assert peak_in_flight([(0, 3), (1, 2), (1.5, 4), (3.5, 5)]) == 3
    assert peak_in_flight([]) == 0


def test_rate_limit_waits_read_from_provenance() -> None:
    assert rate_limit_waits({"provenance": WAITS}) == (2, 0.75)
    assert rate_limit_waits({"provenance": "{}"}) == (0, 0.0)
    assert rate_limit_waits({"provenance": "not json"}) == (0, 0.0)
    assert rate_limit_waits({"provenance": None}) == (0, 0.0)
    assert not math.isnan(rate_limit_waits({})[1])
