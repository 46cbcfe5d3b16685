"""Change points in one series: rank-based binary segmentation for latency, a binomial scan for
success (docs/alerts.md#detection).

Why these methods: latency is bimodal (a cold cache, a noisy neighbour), heavy-tailed and
autocorrelated (a slowly loaded host), and a detector tuned on the one distribution a log
transform makes Gaussian cries wolf on all of them (docs/alerts.md#evaluation has the table).
So the latency test sees only **ranks**: each sample becomes its normal score, Φ⁻¹((r − ½)/n)
for rank r of n (van der Waerden's scores), which are the same numbers whatever the latency's
distribution, so for independent samples the test's false-alarm rate does not depend on it.
For the n scores z of a segment, the statistic of a split after k samples is the two-sample
z-statistic of the scores,

    T(k) = |S_k| / (s · √(k (n − k) / n)),   S_k = Σ_{i<k} (z_i − z̄),

where s² is the long-run variance of the scores: their variance about the two segments' means
times (1 + ρ) / (1 − ρ), ρ the lag-1 autocorrelation of those residuals (floored at 0, at most
`max_rho`). That factor is the variance of a sum of an AR(1) series over that of independent
samples: a slowly wandering host makes excursions that independent samples would not, and the
test asks for correspondingly more evidence. The best split (at least `min_segment` samples
either side) is a change when T exceeds `threshold`; both sides are searched again (binary
segmentation: Vostrikova 1981, the ``BinSeg`` of R's ``changepoint`` and of ``ruptures``), so
several changes in a window are all found. Levels are medians, which the slow mode of a bimodal
series moves far less than a mean.

Success is 1 per ok rollout and 0 per failure. Ranks say nothing of two values, so its test is
exact instead: for each newest stretch of L ≥ `min_segment` samples holding f failures, after
k samples with g failures, the chance of at least f failures in L at the earlier failure rate
(g + ½) / (k + 1) (a spotless history still allows a rare failure); the stretch whose chance is
smallest is the change when −log10 of it exceeds `threshold`. Pure: numbers in, `Change`s out.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from statistics import NormalDist

import numpy as np


@dataclass(frozen=True)
class Binseg:
    """The latency detector's parameters (``[detection]`` in the configuration)."""

    #: T a split must exceed (5.0: docs/alerts.md#evaluation measures what it gives)
    threshold: float = 5.0
    #: the fewest samples on either side of a change: a new level needs this many samples
    min_segment: int = 5
    #: the largest lag-1 autocorrelation the long-run variance believes (0.95: up to 39x)
    max_rho: float = 0.95
    #: ρ is believed only beyond this many standard errors (1/√n) of its estimate: in a short
    #: window, noise alone makes some
    rho_margin: float = 1.0


@dataclass(frozen=True)
class Scan:
    """The success detector's parameters (``[detection]`` in the configuration)."""

    #: −log10 of the chance a newest stretch must be below (4.5: one in ~30,000)
    threshold: float = 4.5
    #: the fewest rollouts of a newest stretch (2: two failures in a row after a clean history)
    min_segment: int = 2


@dataclass(frozen=True)
class Change:
    """A shift whose new regime begins at sample `index`; `before` and `after` are the levels
    of the segments either side (medians of latency, success rates); `statistic` is its T (or
    −log10 of its chance, for success)."""

    index: int
    direction: int  # +1 up, -1 down
    before: float
    after: float
    statistic: float


def detect(values: Sequence[float], params: Binseg) -> list[Change]:
    """Every change in the latencies `values`, in order. Non-finite values are an error
    (callers drop failed samples from latency series). The noise's autocorrelation is
    estimated once for the window (`dependence`), from the differences that straddle none of
    the changes found by a first pass that takes the samples as independent, and every split
    of the second pass is tested with it."""
    x = np.asarray(values, dtype=float)
    if not np.all(np.isfinite(x)):
        raise ValueError("values must be finite")
    if len(x) < 2 * params.min_segment:
        return []
    first = _segment(x, params, 0.0)
    rho = dependence(x, params, sorted(first))
    splits = first if rho == 0.0 else _segment(x, params, rho)
    bounds = [0, *sorted(splits), len(x)]
    changes = []
    for i, k in enumerate(bounds[1:-1], start=1):
        before = float(np.median(x[bounds[i - 1] : k]))
        after = float(np.median(x[k : bounds[i + 1]]))
        changes.append(Change(k, 1 if after > before else -1, before, after, splits[k]))
    return changes


def _segment(x: np.ndarray, params: Binseg, rho: float) -> dict[int, float]:
    """Binary segmentation of `x` at noise autocorrelation `rho`: split index -> its T."""
    splits: dict[int, float] = {}
    todo = [(0, len(x))]
    while todo:
        lo, hi = todo.pop()
        found = best_split(x[lo:hi], params, rho)
        if found is not None and found[1] > params.threshold:
            k = lo + found[0]
            splits[k] = found[1]
            todo += [(lo, k), (k, hi)]
    return splits


def newest_change(values: Sequence[float], params: Binseg) -> Change | None:
    """The newest of `detect`'s changes (None: none)."""
    changes = detect(values, params)
    return changes[-1] if changes else None


def best_split(x: np.ndarray, params: Binseg, rho: float | None = None) -> tuple[int, float] | None:
    """(k, T) of the best split of `x` (the first k samples against the rest; see the module
    docstring), or None when `x` is too short to split. `rho`: the noise's lag-1
    autocorrelation (`dependence`), estimated from `x` when not given."""
    n, m = len(x), params.min_segment
    if n < 2 * m:
        return None
    if rho is None:
        rho = dependence(x, params)
    z = normal_scores(x)
    z = z - z.mean()
    sums = np.abs(np.cumsum(z)[:-1])  # sums[k - 1] = |S_k|
    k = np.arange(1, n)
    weighted = sums / np.sqrt(k * (n - k) / n)
    k_best = int(np.argmax(weighted[m - 1 : n - m])) + m
    left, right = z[:k_best] - z[:k_best].mean(), z[k_best:] - z[k_best:].mean()
    variance = float(np.mean(np.concatenate([left, right]) ** 2))
    if variance <= 0:  # two flat levels: as sure as a split gets
        return k_best, math.inf if weighted[k_best - 1] > 0 else 0.0
    long_run = variance * (1 + rho) / (1 - rho)
    return k_best, float(weighted[k_best - 1]) / math.sqrt(long_run)


def dependence(x: np.ndarray, params: Binseg, splits: Sequence[int] = ()) -> float:
    """The lag-1 autocorrelation of the noise in `x`, from its scores' lag-1 and lag-2
    differences within the segments `splits` cut it into: for AR(1) noise of coefficient ρ,
    E(Δ₂²)/E(Δ₁²) = (1 − ρ²)/(1 − ρ) = 1 + ρ. Differences see a change of level only where
    they straddle it, and those are left out, so a step does not pass for autocorrelation
    (residuals about one split would: a second change looks like dependence). Corrected for
    the estimate's bias in a short series, floored at 0 and capped at `max_rho`."""
    if len(x) < 8:
        return 0.0
    z = normal_scores(x)
    bounds = [0, *splits, len(x)]
    parts = [z[a:b] for a, b in itertools.pairwise(bounds)]
    d1 = sum(float(np.sum(np.diff(p) ** 2)) for p in parts if len(p) > 1)
    d2 = sum(float(np.sum((p[2:] - p[:-2]) ** 2)) for p in parts if len(p) > 2)
    n1 = sum(max(len(p) - 1, 0) for p in parts)
    n2 = sum(max(len(p) - 2, 0) for p in parts)
    if not n1 or not n2 or d1 <= 0:
        return 0.0
    rho = (d2 / n2) / (d1 / n1) - 1.0
    rho += (1 + 3 * rho) / len(x)  # the estimate's bias in a short series (Kendall 1954)
    rho -= params.rho_margin / math.sqrt(len(x))  # what its noise alone could make of none
    return min(max(rho, 0.0), params.max_rho)


def normal_scores(x: np.ndarray) -> np.ndarray:
    """Each value's normal score Φ⁻¹((rank − ½)/n); tied values share their ranks' mean score."""
    n = len(x)
    order = np.argsort(x, kind="stable")
    scores = np.empty(n)
    scores[order] = _scores(n)
    ordered = x[order]
    if n > 1 and bool(np.any(ordered[1:] == ordered[:-1])):
        _, inverse, counts = np.unique(x, return_inverse=True, return_counts=True)
        scores = (np.bincount(inverse, weights=scores) / counts)[inverse]
    return scores


@lru_cache(maxsize=1024)
def _scores(n: int) -> np.ndarray:
    """The n normal scores in rank order (the same for every window of n samples)."""
    inverse = NormalDist().inv_cdf
    scores = np.array([inverse((i + 0.5) / n) for i in range(n)])
    scores.setflags(write=False)
    return scores


def newest_success_change(ok: Sequence[float], params: Scan) -> Change | None:
    """The newest stretch of success flags (1 ok, 0 failed) whose failures are least likely at
    the failure rate before it, as a `Change`, when −log10 of that chance exceeds the threshold
    (see the module docstring); None otherwise. Only drops are tested: a stretch with fewer
    failures than the rate before it predicts is no change a rule asks about."""
    flags = np.asarray(ok, dtype=float)
    n, m = len(flags), params.min_segment
    if n < 2 * m:
        return None
    failed = 1.0 - flags
    before_failures = np.cumsum(failed)  # [k - 1]: failures among the first k
    total = before_failures[-1]
    best: tuple[float, int] | None = None
    # A stretch that starts with an ok rollout is less surprising than the one after it (the
    # same failures in fewer tries), so only stretches that start with a failure are tried.
    for k in np.flatnonzero(failed[m : n - m + 1] > 0) + m:
        g = before_failures[k - 1]
        f = round(float(total - g))
        length = n - k
        rate = (g + 0.5) / (k + 1)
        if f / length <= rate:
            continue
        surprise = -math.log10(max(_tail(length, f, rate), 1e-300))
        if best is None or surprise > best[0]:
            best = (surprise, int(k))
    if best is None or best[0] <= params.threshold:
        return None
    surprise, k = best
    before = 1.0 - before_failures[k - 1] / k
    after = 1.0 - (total - before_failures[k - 1]) / (n - k)
    return Change(k, -1, float(before), float(after), surprise)


def _tail(n: int, f: int, p: float) -> float:
    """P(at least f failures in n independent tries at failure rate p), summed from the f-th
    term up until the terms no longer count (they fall fast beyond the mean, which f exceeds)."""
    if f <= 0:
        return 1.0
    log_term = (
        math.lgamma(n + 1) - math.lgamma(f + 1) - math.lgamma(n - f + 1)
        + f * math.log(p) + (n - f) * math.log1p(-p)
    )  # fmt: skip
    term = math.exp(log_term)
    total, odds = term, p / (1 - p)
    for j in range(f, n):
        term *= (n - j) / (j + 1) * odds
        total += term
        if term < total * 1e-12:
            break
    return min(total, 1.0)
