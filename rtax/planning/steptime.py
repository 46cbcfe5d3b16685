"""Tail-aware step time: a synchronous RL step waits for the slowest of its B x G rollouts.

Why (docs/measurement.md#tail-aware-step-time): a step of B prompts x G samples ends when its
last rollout ends, so its expected time is E[max of B·G rollout times], not the mean of one; with
hundreds of rollouts per step that is a far tail of the distribution, and a substrate with a
good median and a long tail loses. Over-sampling (launch ceil(B·G·(1 + x)), keep the first B·G
to finish) trades extra rollouts for a shorter step: the step then ends at the B·G-th order
statistic of the launched ones.

The method, pure and seeded:

- **Exact for a discrete distribution.** For values v with probabilities p, sorted, and F_j the
  cumulative probability up to v_j, P(X_(k:n) <= v_j) = P(Binomial(n, F_j) >= k), so
  E[X_(k:n)] = sum_j v_j (P(Binomial(n, F_j) >= k) - P(Binomial(n, F_(j-1)) >= k)).
  `expected_order_statistic` computes it (the maximum is k = n: F_j^n).
- **The estimate** is that expectation under the measured samples, each of probability 1/m
  (the plug-in estimate: what E[max] would be if rollouts were drawn from the measured ones).
- **The interval** is a percentile bootstrap: the m samples resampled with replacement
  `resamples` times (seeded), the estimate recomputed on each. The weights depend only on m,
  n and k, so each resample costs a sort.
- **Its limit:** no estimate from m samples exceeds their largest. When B·G is comparable to or
  larger than m, E[max] approaches the sample maximum and an unobserved heavier tail is not
  seen; measure at least B·G rollouts before trusting the figure (the page says when not).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

#: Bound on the (probabilities x binomial terms) block computed at once, to bound memory.
_BLOCK = 2_000_000


@dataclass(frozen=True)
class StepTime:
    """The expected time of one synchronous step, its interval, and the naive figure."""

    #: E[step time]: the expected max of `rollouts` (or their order statistic of `launched`)
    expected_s: float
    low_s: float
    high_s: float
    #: the naive figure: the mean of one rollout
    mean_s: float
    #: B x G: the rollouts a step keeps
    rollouts: int
    #: the rollouts launched: ceil(B·G·(1 + x)); = rollouts without over-sampling
    launched: int
    #: measured samples the estimate is drawn from
    n: int
    confidence: float


def launched(rollouts: int, oversample: float) -> int:
    """ceil(rollouts x (1 + oversample)), free of floating-point noise (1,000 x 1.1 = 1,100)."""
    if rollouts < 1 or not math.isfinite(oversample) or oversample < 0:
        raise ValueError("rollouts must be >= 1 and oversample a finite fraction >= 0")
    return math.ceil(round(rollouts * (1.0 + oversample), 9))


def at_least(k: int, n: int, p: Sequence[float] | np.ndarray) -> np.ndarray:
    """P(Binomial(n, p) >= k) for each p: the chance that at least k of n draws fall at or
    below a value whose cumulative probability is p."""
    probs = np.clip(np.asarray(p, dtype=float), 0.0, 1.0)
    if k <= 0:
        return np.ones_like(probs)
    if k > n:
        return np.zeros_like(probs)
    if k == n:
        return probs**n
    # Sum the shorter side of the binomial: i in [k, n], or 1 - the sum over i in [0, k).
    upper = n - k + 1 <= k
    i = np.arange(k, n + 1) if upper else np.arange(0, k)
    log_choose = np.array(
        [math.lgamma(n + 1) - math.lgamma(j + 1) - math.lgamma(n - j + 1) for j in i]
    )
    out = np.empty_like(probs)
    block = max(1, _BLOCK // len(i))
    with np.errstate(divide="ignore", invalid="ignore"):
        for start in range(0, len(probs), block):
            q = probs[start : start + block, None]
            log_p = np.where(i == 0, 0.0, i * np.log(q))
            log_1p = np.where(i == n, 0.0, (n - i) * np.log1p(-q))
            mass = np.exp(log_choose + log_p + log_1p).sum(axis=1)
            out[start : start + block] = mass if upper else 1.0 - mass
    return np.clip(out, 0.0, 1.0)


def weights(m: int, n: int, k: int | None = None) -> np.ndarray:
    """The weight of the j-th smallest of m equally likely values in E[X_(k:n)]."""
    k = n if k is None else k
    return np.diff(at_least(k, n, np.arange(m + 1) / m))


def expected_order_statistic(
    values: Sequence[float],
    n: int,
    k: int | None = None,
    probabilities: Sequence[float] | None = None,
) -> float:
    """E[k-th smallest of n iid draws] from the discrete distribution `values` (equally likely
    unless `probabilities` are given), exactly; k = n (the default) is the expected maximum."""
    v = np.asarray(values, dtype=float)
    k = n if k is None else k
    if v.size == 0 or n < 1 or not 1 <= k <= n:
        raise ValueError("need values, n >= 1 and 1 <= k <= n")
    p = np.full(v.size, 1.0 / v.size) if probabilities is None else np.asarray(probabilities, float)
    if p.shape != v.shape or np.any(p < 0) or not math.isclose(p.sum(), 1.0, rel_tol=1e-9):
        raise ValueError("probabilities must be >= 0, one per value, summing to 1")
    order = np.argsort(v, kind="stable")
    cumulative = np.concatenate([[0.0], np.cumsum(p[order])])
    cumulative[-1] = 1.0
    return float(v[order] @ np.diff(at_least(k, n, cumulative)))


def step_time(
    durations_s: Sequence[float],
    batch: int,
    group: int,
    *,
    oversample: float = 0.0,
    resamples: int = 1_000,
    confidence: float = 0.95,
    seed: int = 0,
) -> StepTime:
    """The expected time of a synchronous step of `batch` prompts x `group` samples from the
    measured rollout `durations_s` (finite ones), with a bootstrap interval at `confidence` and
    the naive mean beside it. With `oversample` = x, ceil(B·G·(1 + x)) rollouts are launched
    and the step ends when B·G of them have finished."""
    d = np.asarray(durations_s, dtype=float)
    d = np.sort(d[np.isfinite(d)])
    if d.size == 0:
        raise ValueError("step_time needs at least one measured duration")
    if batch < 1 or group < 1 or resamples < 1 or not 0 < confidence < 1:
        raise ValueError("batch, group and resamples must be >= 1; confidence within (0, 1)")
    keep = batch * group
    launch = launched(keep, oversample)
    w = weights(d.size, launch, keep)
    rng = np.random.default_rng(seed)
    boot = np.sort(rng.choice(d, (resamples, d.size)), axis=1) @ w
    tail = (1.0 - confidence) / 2.0 * 100.0
    low, high = np.percentile(boot, (tail, 100.0 - tail))
    return StepTime(
        float(d @ w),
        float(low),
        float(high),
        float(d.mean()),
        keep,
        launch,
        int(d.size),
        confidence,
    )
