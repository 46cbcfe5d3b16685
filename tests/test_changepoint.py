"""Change-point detection (rtax.analysis.changepoint) on synthetic series worked out by hand."""

from __future__ import annotations

import math

import numpy as np
import pytest

from rtax.analysis.changepoint import Binseg, detect, log_seconds, noise

LATENCY = Binseg()
SUCCESS = Binseg(min_sigma=0.25, robust=False)


def _first_found(values: list[float], params: Binseg, at: int) -> int | None:
    """How many samples after `at` the change at `at` is first found, feeding the series in
    one sample at a time (as the scheduler sees it arrive)."""
    for extra in range(1, len(values) - at + 1):
        changes = detect(values[: at + extra], params)
        if changes and abs(changes[-1].index - at) <= 1:
            return extra
    return None


def test_a_clean_step_is_worked_out_by_hand() -> None:
    """30 samples at 1 s, then 3 at 3 s: on the log scale 0 then ln 3. The differences are all
    0 but one, so σ is the floor 0.05; n = 33 and x̄ = 3 ln 3 / 33, so the split after k = 30
    has |S_30| = 30 × 3 ln 3 / 33 = 2.996 and T = 2.996 / (0.05 × √33) = 10.4 > 2."""
    values = log_seconds([1.0] * 30 + [3.0] * 3)
    assert noise(np.array(values), LATENCY) == 0.05
    (change,) = detect(values, LATENCY)
    assert change.index == 30 and change.direction == 1
    assert change.statistic == pytest.approx(30 * 3 * math.log(3) / 33 / (0.05 * math.sqrt(33)))
    assert math.exp(change.before) == pytest.approx(1.0)
    assert math.exp(change.after) == pytest.approx(3.0)


@pytest.mark.parametrize("seed", range(5))
def test_a_noisy_step_from_1s_to_3s_is_found_within_a_few_samples(seed: int) -> None:
    rng = np.random.default_rng(seed)
    seconds = np.r_[rng.lognormal(0, 0.1, 40), rng.lognormal(math.log(3), 0.1, 20)]
    values = log_seconds(seconds)
    assert _first_found(values, LATENCY, 40) is not None
    assert _first_found(values, LATENCY, 40) <= 4
    (change,) = detect(values, LATENCY)
    assert change.index == 40
    assert math.exp(change.after - change.before) == pytest.approx(3.0, rel=0.15)


@pytest.mark.parametrize("seed", range(20))
def test_a_stationary_noisy_series_has_no_change(seed: int) -> None:
    """200 lognormal samples with a 30% spread: T stays under 2 (a Brownian bridge's
    supremum passes 2 with probability ~7e-4)."""
    rng = np.random.default_rng(seed)
    assert detect(log_seconds(rng.lognormal(0, 0.3, 200)), LATENCY) == []


@pytest.mark.parametrize("p", [1.0, 0.95, 0.8])
def test_a_stationary_success_rate_has_no_change(p: float) -> None:
    rng = np.random.default_rng(7)
    assert detect((rng.random(200) < p).astype(float).tolist(), SUCCESS) == []


def test_success_dropping_from_100_to_50_percent_is_found() -> None:
    """30 successes, then failure and success alternating. After m new samples, f of them
    failures, n = 30 + m, p̄ = (n − f) / n, σ = √(p̄(1 − p̄)) and the split after 30 has
    |S_30| = 30 (1 − p̄) = 30 f / n. For m = 12 (f = 6): p̄ = 36/42, σ = 0.350, |S_30| = 4.29,
    T = 4.29 / (0.350 × √42) = 1.89 < 2; for m = 13 (f = 7): p̄ = 36/43, σ = 0.369,
    |S_30| = 4.88, T = 4.88 / (0.369 × √43) = 2.02 > 2: found after 13 samples."""
    values = [1.0] * 30 + [0.0, 1.0] * 20
    assert _first_found(values, SUCCESS, 30) == 13
    (change,) = detect(values, SUCCESS)
    assert change.index == 30 and change.direction == -1
    assert change.before == 1.0 and change.after == pytest.approx(0.5)


def test_a_step_and_its_return_are_two_changes() -> None:
    values = log_seconds([1.0] * 30 + [3.0] * 30 + [1.0] * 30)
    changes = detect(values, LATENCY)
    assert [(c.index, c.direction) for c in changes] == [(30, 1), (60, -1)]


def test_too_short_and_non_finite_series() -> None:
    assert detect([0.0, 5.0], LATENCY) == []
    with pytest.raises(ValueError):
        detect([0.0, math.nan, 1.0, 1.0, 1.0, 1.0], LATENCY)
