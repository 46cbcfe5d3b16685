"""Change-point detection (rtax.analysis.changepoint): the rank statistic worked out on small
series, its indifference to the latency's distribution, the long-run variance that keeps an
autocorrelated series quiet, and the binomial scan for success worked out by hand."""

from __future__ import annotations

import math
from statistics import NormalDist

import numpy as np
import pytest

from rtax.analysis.changepoint import (
    Binseg,
    Scan,
    best_split,
    dependence,
    detect,
    newest_change,
    newest_success_change,
    normal_scores,
)

LATENCY = Binseg()
SUCCESS = Scan()


def test_normal_scores_are_the_ranks_normal_quantiles_and_ties_share_them() -> None:
    """For n = 4 the scores are Φ⁻¹(1/8), Φ⁻¹(3/8), Φ⁻¹(5/8), Φ⁻¹(7/8) in rank order; two
    equal values share the mean of their two scores."""
    inv = NormalDist().inv_cdf
    expected = [inv(0.125), inv(0.375), inv(0.625), inv(0.875)]
    assert normal_scores(np.array([3.0, 1.0, 4.0, 2.0])) == pytest.approx(
        [expected[2], expected[0], expected[3], expected[1]]
    )
    tied = normal_scores(np.array([1.0, 2.0, 2.0, 5.0]))
    assert tied == pytest.approx([expected[0], 0.0, 0.0, expected[3]])


def test_the_split_statistic_is_worked_out_from_its_definition() -> None:
    """T(k) = |S_k| / (s √(k(n−k)/n)) over the scores z, with s² the mean squared residual
    about the two segments' means × (1 + ρ)/(1 − ρ). Written out here with plain loops, for a
    series whose best split is after 6 of 12 samples, at ρ = 0 and at ρ = 0.5."""
    x = np.array([1.0, 1.3, 0.9, 1.2, 1.1, 0.95, 2.1, 1.9, 2.4, 2.0, 2.2, 1.95])
    n, k = len(x), 6
    order = sorted(range(n), key=lambda i: x[i])
    z = [0.0] * n
    for rank, i in enumerate(order):
        z[i] = NormalDist().inv_cdf((rank + 0.5) / n)
    mean = sum(z) / n
    z = [v - mean for v in z]
    s_k = sum(z[:k])
    left, right = z[:k], z[k:]
    residuals = [v - sum(left) / k for v in left] + [v - sum(right) / (n - k) for v in right]
    variance = sum(r * r for r in residuals) / n
    for rho in (0.0, 0.5):
        expected = abs(s_k) / math.sqrt(k * (n - k) / n * variance * (1 + rho) / (1 - rho))
        split, statistic = best_split(x, Binseg(min_segment=3), rho)
        assert split == k
        assert statistic == pytest.approx(expected)


def test_dependence_sees_autocorrelation_but_not_a_step() -> None:
    """The noise's lag-1 autocorrelation from the scores' differences: near φ for an AR(1)
    series, near 0 for independent samples, and still near 0 when those make a 3x step (a
    step straddles one difference; the residuals about one split would call it dependence)."""
    rng = np.random.default_rng(11)
    y = np.zeros(2000)
    for i in range(1, 2000):
        y[i] = 0.8 * y[i - 1] + rng.normal()
    assert dependence(y, LATENCY) == pytest.approx(0.8, abs=0.07)
    independent = rng.normal(size=2000)
    assert dependence(independent, LATENCY) < 0.05
    stepped = np.r_[rng.normal(size=1000), rng.normal(size=1000) + 3.0]
    assert dependence(stepped, LATENCY) < 0.05


@pytest.mark.parametrize("transform", [np.log, np.exp, lambda v: v**3])
def test_the_statistic_sees_only_ranks(transform) -> None:
    """Any increasing transform of the samples gives the same split and the same T: a
    bimodal or heavy-tailed latency is tested exactly as a Gaussian one."""
    rng = np.random.default_rng(3)
    x = np.r_[rng.lognormal(0, 0.2, 80), rng.lognormal(0.4, 0.2, 20)]
    assert best_split(transform(x), LATENCY) == pytest.approx(best_split(x, LATENCY))
    assert dependence(transform(x), LATENCY) == pytest.approx(dependence(x, LATENCY))


@pytest.mark.parametrize("seed", range(20))
def test_a_1_5x_step_is_found_within_ten_samples(seed: int) -> None:
    """195 samples with a 15 % spread, then 1.5× slower: by the tenth slow sample the change
    is found, at its sample, with both levels near their truth."""
    rng = np.random.default_rng(seed)
    x = np.r_[rng.lognormal(0, 0.15, 195), rng.lognormal(math.log(1.5), 0.15, 10)]
    change = newest_change(x, LATENCY)
    assert change is not None and change.direction == 1
    assert abs(change.index - 195) <= 6  # the split may take a slow sample or two either side
    assert change.after / change.before == pytest.approx(1.5, rel=0.2)


@pytest.mark.parametrize(
    "draw",
    [
        lambda rng: rng.lognormal(0, 0.15, 200),
        lambda rng: rng.lognormal(0, 0.15, 200) * np.where(rng.random(200) < 0.2, 2.0, 1.0),
        lambda rng: 1 + rng.pareto(1.5, 200),
    ],
    ids=["lognormal", "bimodal", "pareto"],
)
def test_stationary_windows_of_any_shape_rarely_change(draw) -> None:
    """50 windows of 200 independent samples each: at T > 4.5 at most one finds a change, the
    same bound whatever the shape, since the test sees only ranks."""
    found = sum(bool(detect(draw(np.random.default_rng(s)), LATENCY)) for s in range(50))
    assert found <= 1


def test_the_long_run_variance_keeps_an_autocorrelated_series_quiet() -> None:
    """AR(1) log latency with φ = 0.8 wanders in excursions that independent samples would
    not make. Counting the windows of 200 that find a change among 30: with the long-run
    variance (the default), at most 2; believing the samples independent (max_rho 0), at
    least a third."""

    def ar(seed: int) -> np.ndarray:
        rng = np.random.default_rng(seed)
        y = np.zeros(200)
        for i in range(1, 200):
            y[i] = 0.8 * y[i - 1] + rng.normal(0, 0.15 * math.sqrt(1 - 0.64))
        return np.exp(y)

    corrected = sum(bool(detect(ar(s), LATENCY)) for s in range(30))
    naive = sum(bool(detect(ar(s), Binseg(max_rho=0.0))) for s in range(30))
    assert corrected <= 2 and naive >= 10


def test_a_step_and_its_return_are_two_changes_and_a_new_step_after_them_is_the_newest() -> None:
    """Up, back down, and up again ten samples ago: the long-run variance comes from
    differences, so the first two changes are not mistaken for dependence that would hide
    the third."""
    rng = np.random.default_rng(1)
    levels = [0.0] * 30 + [1.1] * 30 + [0.0] * 100 + [0.4] * 10
    x = np.exp(np.array(levels) + rng.normal(0, 0.1, len(levels)))
    changes = detect(x, LATENCY)
    assert [(c.index, c.direction) for c in changes] == [(30, 1), (60, -1), (160, 1)]
    assert newest_change(x, LATENCY) == changes[-1]


def test_too_short_and_non_finite_series() -> None:
    assert detect([1.0, 5.0], LATENCY) == []
    with pytest.raises(ValueError):
        detect([1.0, math.nan, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0, 1.0], LATENCY)


def test_two_failures_in_a_row_after_a_clean_history_are_a_drop() -> None:
    """195 ok, then two failures. The rate before is (0 + ½)/(195 + 1) = 1/392; two failures
    in two tries at it have chance (1/392)² = 6.5e-6, −log10 = 2 log10 392 = 5.19 > 4.5."""
    change = newest_success_change([1.0] * 195 + [0.0, 0.0], SUCCESS)
    assert change is not None and change.index == 195 and change.direction == -1
    assert change.statistic == pytest.approx(2 * math.log10(392))
    assert (change.before, change.after) == (1.0, 0.0)


def test_two_failures_in_four_are_not_yet() -> None:
    """After the same history, failures at the first and fourth of four: with p = 1/392 the
    chance of at least two in four is 6p²(1−p)² + 4p³(1−p) + p⁴ = 3.89e-5, −log10 = 4.41 <
    4.5 (the stretch from the second failure alone holds one failure: no surprise)."""
    p = 1 / 392
    tail = 6 * p**2 * (1 - p) ** 2 + 4 * p**3 * (1 - p) + p**4
    assert -math.log10(tail) == pytest.approx(4.41, abs=0.01)
    assert newest_success_change([1.0] * 195 + [0.0, 1.0, 1.0, 0.0], SUCCESS) is None


def test_sporadic_failures_are_rarely_a_drop() -> None:
    """A series failing 1 % of the time: of 200 independent windows of 200, at most two hold
    a stretch unlikely enough (a long clean run, then several failures close together). The
    windows a scheduler reads overlap, one new sample each, so per sample this is far rarer:
    docs/alerts.md#evaluation measures it (sporadic failures 1 %)."""
    rng = np.random.default_rng(5)
    hits = 0
    for _ in range(200):
        flags = (rng.random(200) >= 0.01).astype(float)
        hits += newest_success_change(flags, SUCCESS) is not None
    assert hits <= 2
