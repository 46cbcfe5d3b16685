"""Tail-aware step time against known order statistics
(docs/measurement.md#tail-aware-step-time)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from rtax.planning.steptime import at_least, expected_order_statistic, launched, step_time

M = 100_000
#: A fine grid of equally likely quantiles: a discrete stand-in for a continuous distribution.
GRID = (np.arange(1, M + 1) - 0.5) / M


def harmonic(n: int) -> float:
    return sum(1.0 / i for i in range(1, n + 1))


def test_two_point_distribution_by_hand() -> None:
    """1 s or 10 s, equally likely. The max of 3 is 1 only if all three are 1: 1/8 x 1 +
    7/8 x 10 = 8.875. The 2nd smallest of 3 is 1 when at least two are 1 (4 of 8 cases):
    0.5 x 1 + 0.5 x 10 = 5.5. With 1/4 and 3/4: the max of 2 is 1 with 1/16."""
    assert expected_order_statistic([1.0, 10.0], 3) == pytest.approx(8.875)
    assert expected_order_statistic([10.0, 1.0], 3, 2) == pytest.approx(5.5)
    assert expected_order_statistic([1.0, 10.0], 2, probabilities=[0.25, 0.75]) == pytest.approx(
        1 / 16 + 10 * 15 / 16
    )
    assert expected_order_statistic([1.0, 10.0], 3, 1) == pytest.approx(1 * 7 / 8 + 10 / 8)


@pytest.mark.parametrize("n", [1, 2, 10, 100])
def test_max_of_uniforms_is_n_over_n_plus_1(n: int) -> None:
    assert expected_order_statistic(GRID, n) == pytest.approx(n / (n + 1), abs=1e-4)


@pytest.mark.parametrize(("n", "k"), [(9, 3), (20, 1), (50, 45)])
def test_kth_order_statistic_of_uniforms_is_k_over_n_plus_1(n: int, k: int) -> None:
    assert expected_order_statistic(GRID, n, k) == pytest.approx(k / (n + 1), abs=1e-4)


@pytest.mark.parametrize("n", [1, 10, 50])
def test_max_of_exponentials_is_the_harmonic_number(n: int) -> None:
    exponential = -np.log1p(-GRID)
    assert expected_order_statistic(exponential, n) == pytest.approx(harmonic(n), rel=1e-3)
    # and the k-th of n: H_n - H_(n-k)
    assert expected_order_statistic(exponential, n, max(1, n // 2)) == pytest.approx(
        harmonic(n) - harmonic(n - max(1, n // 2)), rel=1e-3
    )


def test_binomial_tail_by_hand() -> None:
    # at least 2 of 3 with p = 1/2: 4/8; at least 1 of 3 with p = 0.1: 1 - 0.9^3
    assert at_least(2, 3, [0.5])[0] == pytest.approx(0.5)
    assert at_least(1, 3, [0.1])[0] == pytest.approx(1 - 0.9**3)
    assert list(at_least(4, 5, [0.0, 1.0])) == [0.0, 1.0]


def test_the_bootstrap_interval_holds_the_true_expected_max() -> None:
    rng = np.random.default_rng(11)
    uniform = step_time(rng.uniform(size=500), 2, 5)  # B·G = 10: E = 10/11
    assert uniform.low_s <= 10 / 11 <= uniform.high_s
    assert uniform.high_s - uniform.low_s < 0.05
    assert uniform.mean_s == pytest.approx(0.5, abs=0.03)  # the naive figure: half the truth
    exponential = step_time(rng.exponential(size=5_000), 4, 5)  # E = H_20 = 3.598
    assert exponential.low_s <= harmonic(20) <= exponential.high_s
    assert exponential.rollouts == exponential.launched == 20 and exponential.n == 5_000


def test_the_estimate_is_what_simulating_steps_from_the_samples_gives() -> None:
    """Computed another way: draw 40,000 steps of 12 rollouts (launching 15) from the samples
    and keep the 12th fastest; the mean lands on the exact plug-in figure."""
    rng = np.random.default_rng(4)
    samples = rng.lognormal(0.0, 0.8, 300)
    got = step_time(samples, 3, 4, oversample=0.25)
    assert got.launched == 15
    steps = np.sort(rng.choice(samples, (40_000, 15)), axis=1)[:, 11]
    assert got.expected_s == pytest.approx(steps.mean(), rel=0.01)


def test_over_sampling_two_point_by_hand() -> None:
    """B·G = 2 from [1, 10]: the max of 2 is 1/4 x 1 + 3/4 x 10 = 7.75. Launch 3 (x = 0.5)
    and keep 2: the 2nd of 3, 5.5. The naive mean is 5.5 either way."""
    plain = step_time([1.0, 10.0], 1, 2)
    assert plain.expected_s == pytest.approx(7.75) and plain.mean_s == 5.5
    over = step_time([1.0, 10.0], 1, 2, oversample=0.5)
    assert (over.launched, over.rollouts) == (3, 2)
    assert over.expected_s == pytest.approx(5.5)
    assert plain.low_s <= plain.expected_s <= plain.high_s


def test_a_constant_distribution_has_no_tail() -> None:
    got = step_time([2.0] * 10, 64, 16)
    assert (got.expected_s, got.low_s, got.high_s, got.mean_s) == pytest.approx((2, 2, 2, 2))


def test_launched_is_free_of_float_noise() -> None:
    assert launched(1_000, 0.1) == 1_100
    assert launched(10, 0.01) == 11
    assert launched(7, 0.0) == 7
    with pytest.raises(ValueError):
        launched(10, -0.1)


def test_seeded_and_nonfinite_samples_dropped() -> None:
    samples = [1.0, 2.0, 3.0, math.nan, 5.0]
    assert step_time(samples, 2, 2, seed=1) == step_time(samples, 2, 2, seed=1)
    assert step_time(samples, 2, 2).n == 4
    with pytest.raises(ValueError):
        step_time([math.nan], 1, 1)
