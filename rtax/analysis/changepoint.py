"""Change points in one series: binary segmentation with the CUSUM statistic.

Why this method (docs/alerts.md#detection): it is the textbook test for shifts in the mean
(Page's CUSUM statistic; binary segmentation, Vostrikova 1981, the ``BinSeg`` of R's
``changepoint`` and of ``ruptures``), it needs no optimisation and no library, it can be worked
out by hand, and its threshold has a known meaning. For n samples with noise σ, the statistic
of a split after k samples is

    T(k) = |S_k| / (σ √n),   S_k = Σ_{i<k} (x_i − x̄),

and with no change the largest T over k behaves as the supremum of a Brownian bridge, which
exceeds c with probability about 2·exp(−2c²): the default c = 2.0 is a false alarm in ~1,500
stationary windows, and a rule's magnitude (1.5× by default) filters what is left. The split at
the largest T (at least `min_segment` samples either side) is a change when T > c; each side is
then searched again, so several changes in a window are all found.

Latency is taken on a log scale, so a change is a ratio (1 s to 3 s and 10 s to 30 s are the
same shift) and the right tail weighs less; its σ is the robust estimate from successive
differences (1.4826 × MAD(Δx) / √2), which a step does not inflate. Success is 1 per ok rollout
and 0 per failure, with σ = √(p̄(1 − p̄)). Both σ are floored (`min_sigma`), so a very quiet
series does not alarm on a millisecond. Pure: numbers in, `Change`s out.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

#: The MAD of a normal sample times this estimates its standard deviation.
MAD_SCALE = 1.4826


@dataclass(frozen=True)
class Binseg:
    """The detector's parameters (``[detection]`` in the configuration)."""

    #: c: the CUSUM statistic a split must exceed
    threshold: float = 2.0
    #: the fewest samples on either side of a change
    min_segment: int = 3
    #: floor of σ, in the units the test sees (log seconds, or success)
    min_sigma: float = 0.05
    #: latency (log scale, median levels, σ from differences) or success (0/1, mean levels)
    robust: bool = True


@dataclass(frozen=True)
class Change:
    """A shift whose new regime begins at sample `index`; `before` and `after` are the levels
    (medians for latency, means for success) of the segments either side, in the test's units
    (log seconds, or success); `statistic` is its T."""

    index: int
    direction: int  # +1 up, -1 down
    before: float
    after: float
    statistic: float


def detect(values: Sequence[float], params: Binseg) -> list[Change]:
    """Every change in `values`, in order. Non-finite values are an error (callers drop failed
    samples from latency series)."""
    x = np.asarray(values, dtype=float)
    if not np.all(np.isfinite(x)):
        raise ValueError("values must be finite")
    if len(x) < 2 * params.min_segment:
        return []
    sigma = noise(x, params)
    splits: dict[int, float] = {}
    todo = [(0, len(x))]
    while todo:
        lo, hi = todo.pop()
        found = _best_split(x, lo, hi, sigma, params)
        if found is not None:
            k, statistic = found
            splits[k] = statistic
            todo += [(lo, k), (k, hi)]
    bounds = [0, *sorted(splits), len(x)]
    changes = []
    for i, k in enumerate(bounds[1:-1], start=1):
        before = _level(x[bounds[i - 1] : k], params)
        after = _level(x[k : bounds[i + 1]], params)
        changes.append(Change(k, 1 if after > before else -1, before, after, splits[k]))
    return changes


def noise(x: np.ndarray, params: Binseg) -> float:
    """σ of the series (see the module docstring), floored at `min_sigma`."""
    if params.robust:
        spread = MAD_SCALE * float(np.median(np.abs(np.diff(x)))) / math.sqrt(2)
    else:
        p = float(x.mean())
        spread = math.sqrt(p * (1 - p))
    return max(spread, params.min_sigma)


def _best_split(
    x: np.ndarray, lo: int, hi: int, sigma: float, params: Binseg
) -> tuple[int, float] | None:
    """(index of the first sample after the split, T) of x[lo:hi]'s best split, if T > c."""
    segment = x[lo:hi]
    n, m = len(segment), params.min_segment
    if n < 2 * m:
        return None
    sums = np.abs(np.cumsum(segment - segment.mean()))[:-1]  # sums[k - 1] = |S_k|
    candidates = sums[m - 1 : n - m]  # k from m to n - m
    k = int(np.argmax(candidates)) + m
    statistic = float(candidates[k - m]) / (sigma * math.sqrt(n))
    return (lo + k, statistic) if statistic > params.threshold else None


def _level(x: np.ndarray, params: Binseg) -> float:
    return float(np.median(x) if params.robust else np.mean(x))


def log_seconds(seconds: Sequence[float]) -> list[float]:
    """Latencies as the test sees them: natural log, floored at 1 µs (a zero has no log)."""
    return [math.log(max(float(s), 1e-6)) for s in seconds]
