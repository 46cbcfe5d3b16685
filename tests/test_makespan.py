"""Tail-aware step time against known order statistics
(docs/measurement.md#tail-aware-step-time)."""

from __future__ import annotations

import math

import numpy as np
import pytest

import stepcoverage
from rtax.planning.steptime import (
    at_least,
    expected_order_statistic,
    fit,
    launched,
    step_time,
)

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


def test_the_interval_holds_the_true_expected_max_where_it_is_shown() -> None:
    """Uniform: E[max of 10] = 10/11; exponential: E[max of 20] = H_20 = 3.598 (a tail the
    generalised Pareto fits exactly, shape 0), from enough samples for an interval."""
    rng = np.random.default_rng(11)
    uniform = step_time(rng.uniform(size=2_000), 2, 5)
    assert uniform.low_s <= 10 / 11 <= uniform.high_s
    assert uniform.high_s - uniform.low_s < 0.05
    assert uniform.mean_s == pytest.approx(0.5, abs=0.03)  # the naive figure: half the truth
    exponential = step_time(rng.exponential(size=5_000), 4, 5)
    assert exponential.low_s <= harmonic(20) <= exponential.high_s
    assert exponential.rollouts == exponential.launched == 20 and exponential.n == 5_000
    assert exponential.extrapolated is None and exponential.statistic == "E[max of 20]"


def test_the_plug_in_is_what_simulating_steps_from_the_samples_gives() -> None:
    """Computed another way: draw 40,000 steps of 12 rollouts (launching 15) from the samples
    and keep the 12th fastest; the mean lands on the exact plug-in figure."""
    rng = np.random.default_rng(4)
    samples = rng.lognormal(0.0, 0.8, 300)
    assert launched(12, 0.25) == 15
    steps = np.sort(rng.choice(samples, (40_000, 15)), axis=1)[:, 11]
    assert expected_order_statistic(samples, 15, 12) == pytest.approx(steps.mean(), rel=0.01)


def test_the_fitted_tail_agrees_with_the_samples_inside_them_and_goes_on_past_them() -> None:
    """Where the statistic lies inside what was measured (the 12th of 15 of 3,000 samples),
    the semi-parametric estimate is the plug-in's; where a step is far larger than the sample
    (the max of 100,000 from 3,000), it goes past the slowest measured, towards the truth
    (lognormal sigma 0.5: E[max of 100,000] = 7.8), where the plug-in can't."""
    rng = np.random.default_rng(5)
    samples = rng.lognormal(0.0, 0.5, 3_000)
    inside = step_time(samples, 3, 4, oversample=0.25)
    assert inside.expected_s == pytest.approx(expected_order_statistic(samples, 15, 12), rel=0.01)
    far = step_time(samples, 1_000, 100)
    assert expected_order_statistic(samples, 100_000) <= samples.max() < far.expected_s
    assert far.expected_s == pytest.approx(7.8, rel=0.25)


def test_a_failed_rollout_holds_the_step_until_its_deadline() -> None:
    """900 rollouts near 1 s and 100 failures, deadline 60 s: a step of 64 has a failure in
    it unless all 64 succeed (0.9^64 = 0.1 %), so it waits ~60 s, and never longer; with one
    retry a failure costs its attempt and a second rollout (up to two deadlines)."""
    rng = np.random.default_rng(6)
    ok = rng.lognormal(0.0, 0.2, 900)
    failed = rng.uniform(1, 5, 100)
    waited = step_time(fit(ok, failed, deadline_s=60.0), 8, 8)
    assert 59.0 < waited.expected_s <= 60.0
    assert (waited.n, waited.failures) == (900, 100)
    assert waited.high_s <= 60.0
    retried = step_time(fit(ok, failed, deadline_s=60.0, retry=True), 8, 8)
    assert retried.expected_s < waited.expected_s  # the retry usually succeeds in ~1 s
    assert retried.expected_s <= 120.0
    capped = step_time(fit(ok, deadline_s=1.2), 1_000, 1_000)
    assert capped.expected_s <= 1.2  # no rollout outlasts its deadline, fitted tail or not
    with pytest.raises(ValueError, match="deadline"):
        fit(ok, failed)


def test_too_few_samples_are_extrapolated_and_say_why() -> None:
    few = step_time(np.random.default_rng(7).lognormal(0.0, 0.5, 300), 16, 16)
    assert few.low_s is None and few.high_s is None
    assert "300 measured rollouts" in few.extrapolated
    tiny = step_time([1.0, 2.0, 3.0], 1, 2)
    assert tiny.low_s is None and "too few to fit a tail" in tiny.extrapolated


def test_at_the_page_limits_the_figure_is_finite_and_labelled() -> None:
    """B = 100,000, G = 1,000 and 10x over-sampling: 1.1 billion launched; the figure is a
    number, and the label says which order statistic it is."""
    f = fit(np.random.default_rng(8).lognormal(0.0, 0.5, 3_000))
    top = step_time(f, 100_000, 1_000)
    over = step_time(f, 100_000, 1_000, oversample=10.0)
    assert math.isfinite(top.expected_s) and top.statistic == "E[max of 100,000,000]"
    assert over.statistic == "E[100,000,000th to finish of 1,100,000,000]"
    assert over.expected_s < 1.0 < top.expected_s  # the fastest 9 % of 1.1 billion


def test_over_sampling_two_point_by_hand() -> None:
    """B·G = 2 from [1, 10]: the max of 2 is 1/4 x 1 + 3/4 x 10 = 7.75. Launch 3 (x = 0.5)
    and keep 2: the 2nd of 3, 5.5. The naive mean is 5.5 either way."""
    plain = step_time([1.0, 10.0], 1, 2)
    assert plain.expected_s == pytest.approx(7.75) and plain.mean_s == 5.5
    over = step_time([1.0, 10.0], 1, 2, oversample=0.5)
    assert (over.launched, over.rollouts) == (3, 2)
    assert over.expected_s == pytest.approx(5.5)
    assert plain.low_s is None and plain.extrapolated  # two samples: no interval


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
    many = np.random.default_rng(9).lognormal(0.0, 0.5, 1_000)
    assert step_time(fit(many, seed=1), 2, 2) == step_time(fit(many, seed=1), 2, 2)
    assert step_time(samples, 2, 2).n == 4
    with pytest.raises(ValueError):
        step_time([math.nan], 1, 1)


@pytest.mark.timeout(3600)  # ~11 min on two cores: 25,600 fits of up to 3,000 samples
def test_wherever_the_page_shows_an_interval_it_covers_the_true_expected_max() -> None:
    """The acceptance of issue 24, by simulation (tests/stepcoverage.py): lognormal σ 0.5 and
    1.0, Pareto α 2.5 and a bimodal mixture, m ∈ {100, 300, 1,000, 3,000} measured rollouts,
    B·G ∈ {64, 256, 1,024, 4,096}, 400 seeded trials per cell. Where `step_time` shows an
    interval, its nominal 95 % covers the true E[max] in >= 90 % of the trials; elsewhere it
    says extrapolated. Every cell is computed (the docs' table), split over the cores."""
    found = stepcoverage.table(400)
    assert len(found) == 4 * 4 * 4
    rng = np.random.default_rng(0)
    for (family, m, n), cell in found.items():
        shows = step_time(stepcoverage.draw(family, rng, m), n, 1).low_s is not None
        assert cell.shown == shows
        assert cell.shown or cell.coverage >= 0  # hidden: said extrapolated, not judged
        if cell.shown:
            assert cell.coverage >= 0.90, (family, m, n, cell)
    assert sum(c.shown for c in found.values()) >= 16  # intervals are shown from m = 1,000
