"""Tail-aware step time: a synchronous RL step waits for the slowest of its B x G rollouts.

Why (docs/measurement.md#tail-aware-step-time): a step of B prompts x G samples ends when its
last rollout ends, so its expected time is E[max of B·G rollout times], not the mean of one; with
hundreds of rollouts per step that is a far tail of the distribution, and a substrate with a
good median and a long tail loses. Over-sampling (launch ceil(B·G·(1 + x)), keep the first B·G
to finish) trades extra rollouts for a shorter step: the step then ends at the B·G-th order
statistic of the launched ones.

The method, pure and seeded:

- **Order statistics of a distribution.** For a quantile function Q, E[X_(k:n)] is the integral
  of Q against the law of the k-th of n uniforms, whose distribution function at p is
  P(Binomial(n, p) >= k) (`at_least`); for m equally likely values that is exact
  (`expected_order_statistic`; the maximum is k = n: p^n).
- **What a step waits for** (`waits`): a successful rollout its measured time; a failed one
  until the rollout's deadline (the step can't end before it gives up on it), or, under a retry
  policy, the failed attempt plus one more rollout drawn from what was measured. No rollout
  outlasts its deadline (two deadlines with a retry): the fitted tail is cut there.
- **The estimate** is semi-parametric: below the slowest tenth of the m waits (at least 10),
  their own values; above, a generalised Pareto tail fitted to the exceedances
  (`zhang_stephens`), which goes on past the slowest measured where a step of B·G ≥ m does.
  The plain plug-in estimate (the m values alone) can never exceed their largest, and its
  bootstrap interval covered 41 % where 95 % was claimed (docs/measurement.md).
- **The interval** is a percentile bootstrap over the whole fit (the waits resampled, the tail
  refitted on each), read at `_RANGE` (99.5 %) to give the nominal 95 %: a bootstrap of a tail
  fit under-covers (its resamples share the sample's extremes), and 99.5 % is the range that
  held >= 90 % coverage over every family of the simulation (tests/stepcoverage.py, the table
  in the docs). Where the simulation found it uninformative (`interval_holds`: it held only by
  spanning the truth tens of times over), no interval is shown and the figure is
  **extrapolated**, with the reason (`StepTime.extrapolated`).
- **Speed.** The fit (sorting each resample, fitting its tail) depends only on the sample;
  `fit` does it once, and a step of any B, G and over-sampling is then two weight vectors and
  a matrix product (`step_time`): milliseconds, whatever B·G, which is what a page's slider
  needs. The k-th of n beyond `_EXACT_TERMS` binomial terms uses the normal approximation.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

#: Bootstrap resamples of a fit: enough for the 99.5 % range's ends (2.5 resamples beyond each),
#: few enough that fitting 3,000 waits takes well under a second.
RESAMPLES = 1_000
#: The bootstrap range read as the nominal 95 % interval (see the module's doc).
_RANGE = 0.995
#: The nominal level the interval is shown at, as validated by the simulation.
CONFIDENCE = 0.95
#: Fewest waits for a tail fit; below, the plug-in figure, said to be extrapolated.
MIN_FIT = 20
#: Fewest waits for an interval. Below it the simulation's intervals still held the truth
#: (98-100 %), but only by spanning it widely: up to 224x high / low from 300 waits of a
#: Pareto, 745x from 100 of a lognormal sigma 1. A tail fitted to 10 or 30 exceedances is a
#: guess, so the figure is said to be extrapolated instead (`interval_holds`).
INTERVAL_MIN_SAMPLES = 1_000
#: The slowest fraction of the waits the tail is fitted to (at least `_MIN_TOP` of them).
TAIL = 0.1
_MIN_TOP = 10
#: Bound on the (probabilities x binomial terms) block computed at once, to bound memory.
_BLOCK = 2_000_000
#: Beyond this many binomial terms the tail is taken from the normal approximation: n is then
#: in the tens of thousands, where it is accurate to well under the sampling error.
_EXACT_TERMS = 4_096
#: Resamples whose tails are fitted at once (bounds the grid x exceedances block in memory).
_ZS_ROWS = 64
#: Points of the fitted tail's quantile grid (log-spaced in 1 - p, down to 1e-4 / n).
_TAIL_POINTS = 1_500


@dataclass(frozen=True)
class StepTime:
    """The expected time of one synchronous step, its interval (or why there is none), and
    the naive figure."""

    #: E[step time]: the expected max of `rollouts` (or their order statistic of `launched`)
    expected_s: float
    #: the interval at `confidence`; None when the figure is extrapolated
    low_s: float | None
    high_s: float | None
    #: the naive figure: the mean of one successful rollout
    mean_s: float
    #: B x G: the rollouts a step keeps
    rollouts: int
    #: the rollouts launched: ceil(B·G·(1 + x)); = rollouts without over-sampling
    launched: int
    #: measured successful rollouts, and failed ones, the estimate is drawn from
    n: int
    failures: int
    confidence: float
    #: what the figure is: "E[max of 256]", or "E[256th to finish of 282]"
    statistic: str
    #: why no interval is shown (the figure extends the tail by a fit); None: it is measured
    extrapolated: str | None = None


@dataclass(frozen=True)
class Fit:
    """A sample of waits fitted once (`fit`): row 0 the sample, rows 1.. its bootstrap
    resamples, each sorted, with its tail's threshold, shape and scale. What a step time of
    any size is computed from."""

    rows: np.ndarray
    threshold: np.ndarray
    shape: np.ndarray
    scale: np.ndarray
    #: how many of the slowest waits the tail replaces (0: no tail, the plug-in)
    top: int
    #: no wait can exceed this (the deadline; two with a retry); inf: no deadline given
    cap: float
    n: int
    failures: int
    mean_s: float

    @property
    def m(self) -> int:
        """The waits the estimate is drawn from: successes and failures."""
        return int(self.rows.shape[1])


def launched(rollouts: int, oversample: float) -> int:
    """ceil(rollouts x (1 + oversample)), free of floating-point noise (1,000 x 1.1 = 1,100)."""
    if rollouts < 1 or not math.isfinite(oversample) or oversample < 0:
        raise ValueError("rollouts must be >= 1 and oversample a finite fraction >= 0")
    return math.ceil(round(rollouts * (1.0 + oversample), 9))


def at_least(k: int, n: int, p: Sequence[float] | np.ndarray) -> np.ndarray:
    """P(Binomial(n, p) >= k) for each p: the chance that at least k of n draws fall at or
    below a value whose cumulative probability is p. Vectorised: at most `_EXACT_TERMS`
    binomial terms per p (the shorter side of the sum), else the normal approximation."""
    probs = np.clip(np.asarray(p, dtype=float), 0.0, 1.0)
    if k <= 0:
        return np.ones_like(probs)
    if k > n:
        return np.zeros_like(probs)
    if k == n:
        return probs**n
    upper = n - k + 1 <= k  # sum i in [k, n], else 1 - the sum over i in [0, k)
    first, last = (k, n) if upper else (0, k - 1)
    if last - first + 1 > _EXACT_TERMS:
        return _normal_at_least(k, n, probs)
    i = np.arange(first, last + 1)
    steps = np.log((n - i[1:] + 1) / i[1:])  # log C(n, j) - log C(n, j - 1)
    start = math.lgamma(n + 1) - math.lgamma(first + 1) - math.lgamma(n - first + 1)
    log_choose = np.concatenate([[start], start + np.cumsum(steps)])
    out = np.empty_like(probs)
    block = max(1, _BLOCK // len(i))
    with np.errstate(divide="ignore", invalid="ignore"):
        for begin in range(0, len(probs), block):
            q = probs[begin : begin + block, None]
            log_p = np.where(i == 0, 0.0, i * np.log(q))
            log_1p = np.where(i == n, 0.0, (n - i) * np.log1p(-q))
            mass = np.exp(log_choose + log_p + log_1p).sum(axis=1)
            out[begin : begin + block] = mass if upper else 1.0 - mass
    return np.clip(out, 0.0, 1.0)


_erfc = np.frompyfunc(math.erfc, 1, 1)


def _normal_at_least(k: int, n: int, probs: np.ndarray) -> np.ndarray:
    """P(Binomial(n, p) >= k) by the normal approximation with continuity correction."""
    sd = np.sqrt(n * probs * (1.0 - probs))
    with np.errstate(divide="ignore", invalid="ignore"):
        z = (k - 0.5 - n * probs) / sd
    tail = 0.5 * _erfc(np.nan_to_num(z, posinf=40.0, neginf=-40.0) / math.sqrt(2.0))
    tail = np.asarray(tail, dtype=float)
    return np.clip(np.where(sd > 0, tail, (probs * n >= k).astype(float)), 0.0, 1.0)


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


def waits(
    durations_s: Sequence[float],
    failures_s: Sequence[float | None] = (),
    *,
    deadline_s: float | None = None,
    retry: bool = False,
    seed: int = 0,
) -> np.ndarray:
    """What a step waits for on each measured outcome (see the module's doc): a success its
    time; a failure the deadline, or under `retry` the failed attempt's time (None: 0) plus one
    more outcome drawn from the measured ones (seeded), itself a failure: to the deadline."""
    done = np.asarray(durations_s, dtype=float)
    done = done[np.isfinite(done)]
    failed = np.array([0.0 if f is None else float(f) for f in failures_s], dtype=float)
    if failed.size == 0:
        return done
    if deadline_s is None or not math.isfinite(deadline_s) or deadline_s <= 0:
        raise ValueError("failed rollouts need the deadline a step waits for them (seconds > 0)")
    failed = np.clip(np.nan_to_num(failed, nan=0.0), 0.0, deadline_s)
    if not retry:
        return np.concatenate([done, np.full(failed.size, float(deadline_s))])
    rng = np.random.default_rng(seed)
    outcomes = np.concatenate([done, np.full(failed.size, float(deadline_s))])
    again = rng.choice(outcomes, failed.size)
    return np.concatenate([done, failed + again])


def fit(
    durations_s: Sequence[float],
    failures_s: Sequence[float | None] = (),
    *,
    deadline_s: float | None = None,
    retry: bool = False,
    resamples: int = RESAMPLES,
    seed: int = 0,
) -> Fit:
    """The waits of the measured rollouts (`waits`) and `resamples` bootstrap resamples of
    them (seeded), sorted, each with a generalised Pareto tail fitted to its slowest `TAIL`:
    the costly part of a step time, done once per sample."""
    if resamples < 1:
        raise ValueError("resamples must be >= 1")
    ok = np.asarray(durations_s, dtype=float)
    ok = ok[np.isfinite(ok)]
    if ok.size == 0:
        raise ValueError("a step time needs at least one measured duration")
    d = np.sort(waits(ok, failures_s, deadline_s=deadline_s, retry=retry, seed=seed))
    cap = math.inf if deadline_s is None else float(deadline_s) * (2 if retry else 1)
    m = d.size
    nothing = np.zeros(1)
    if m < MIN_FIT or d[0] == d[-1]:
        return Fit(d[None, :], nothing, nothing, nothing, 0, cap, ok.size, m - ok.size, ok.mean())
    rng = np.random.default_rng(seed)
    small = np.int16 if m <= np.iinfo(np.int16).max else np.int32  # sorts 3-4x faster
    picks = np.sort(rng.integers(0, m, (resamples, m), dtype=small), axis=1)
    rows = np.vstack([d, d[picks]])
    top = max(_MIN_TOP, int(m * TAIL))
    threshold = rows[:, m - top - 1]
    shape, scale = zhang_stephens(rows[:, m - top :] - threshold[:, None])
    return Fit(rows, threshold, shape, scale, top, cap, ok.size, m - ok.size, float(ok.mean()))


def expected(f: Fit, n: int, k: int | None = None) -> np.ndarray:
    """E[X_(k:n)] under each row of the fit: the row's own values below its tail, the fitted
    tail above on a grid of quantiles log-spaced far past 1/n, cut at the fit's cap. Row 0 is
    the estimate, the others its bootstrap copies."""
    k = n if k is None else k
    if n < 1 or not 1 <= k <= n:
        raise ValueError("need n >= 1 and 1 <= k <= n")
    m, top = f.m, f.top
    body_w = np.diff(at_least(k, n, np.arange(m - top + 1) / m))
    body = f.rows[:, : m - top] @ body_w
    if top == 0:
        return body
    t = np.geomspace(top / m, min(top / m, 1e-4 / n), _TAIL_POINTS)  # 1 - p, falling
    tail_w = np.diff(at_least(k, n, 1.0 - t))
    ratio = np.sqrt(t[:-1] * t[1:]) / (top / m)
    x = f.shape[:, None]
    flat = np.abs(x) < 1e-6
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        grown = np.where(
            flat, -np.log(ratio)[None, :], (ratio[None, :] ** (-x) - 1) / np.where(flat, 1, x)
        )
    q = np.minimum(f.threshold[:, None] + f.scale[:, None] * grown, f.cap)
    beyond = 1.0 - at_least(k, n, np.array([1.0 - t[-1]]))[0]
    return body + q @ tail_w + q[:, -1] * beyond


def ordinal(k: int) -> str:
    """1st, 2nd, 3rd, 4th, 11th, 12th, 13th, 21st, ..., with thousands separators."""
    suffix = "th" if k % 100 in (11, 12, 13) else {1: "st", 2: "nd", 3: "rd"}.get(k % 10, "th")
    return f"{k:,}{suffix}"


def interval_holds(m: int) -> str | None:
    """Why no interval is shown for an estimate from `m` waits (None: one is). The rule is
    the coverage simulation's (tests/stepcoverage.py, docs/measurement.md)."""
    if m < INTERVAL_MIN_SAMPLES:
        return (
            f"{m:,} measured rollouts: below {INTERVAL_MIN_SAMPLES:,}, the tail fitted past "
            "them is too uncertain for a useful interval (in the simulation, up to 224x wide "
            "from 300); the figure extends the measured tail by a fitted Pareto tail"
        )
    return None


def step_time(
    sample: Fit | Sequence[float],
    batch: int,
    group: int,
    *,
    oversample: float = 0.0,
) -> StepTime:
    """The expected time of a synchronous step of `batch` prompts x `group` samples from a
    `fit` (or from measured successful durations, fitted here), with its interval where one
    holds (else the figure is extrapolated, and says why) and the naive mean beside it. With
    `oversample` = x, ceil(B·G·(1 + x)) rollouts are launched and the step ends when B·G of
    them have finished."""
    if batch < 1 or group < 1:
        raise ValueError("batch and group must be >= 1")
    f = sample if isinstance(sample, Fit) else fit(sample)
    keep = batch * group
    launch = launched(keep, oversample)
    statistic = (
        f"E[max of {keep:,}]" if launch == keep else f"E[{ordinal(keep)} to finish of {launch:,}]"
    )
    base = {
        "mean_s": f.mean_s,
        "rollouts": keep,
        "launched": launch,
        "n": f.n,
        "failures": f.failures,
        "confidence": CONFIDENCE,
        "statistic": statistic,
    }
    values = expected(f, launch, keep)
    estimate = float(values[0])
    if f.rows[0, 0] == f.rows[0, -1]:  # no spread: every order statistic is that value
        return StepTime(estimate, estimate, estimate, **base)
    if f.top == 0:
        reason = f"{f.m} measured rollouts: too few to fit a tail, and none is seen past them"
        return StepTime(estimate, None, None, **base, extrapolated=reason)
    reason = interval_holds(f.m)
    if reason is not None:
        return StepTime(estimate, None, None, **base, extrapolated=reason)
    low, high = bootstrap_range(values)
    return StepTime(estimate, low, high, **base)


def bootstrap_range(values: np.ndarray) -> tuple[float, float]:
    """The interval shown for `expected`'s values (row 0 the estimate): the bootstrap copies'
    central `_RANGE`, widened to hold the estimate itself."""
    low, high = np.percentile(values[1:], (50 * (1 - _RANGE), 50 * (1 + _RANGE)))
    return float(min(low, values[0])), float(max(high, values[0]))


def zhang_stephens(y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The generalised Pareto shape xi and scale sigma of each row of exceedances `y` (sorted,
    > 0), by Zhang and Stephens (2009): theta = -xi/sigma averaged over a grid, each point
    weighted by its profile likelihood. Chosen over probability-weighted moments by the
    coverage simulation: PWM's shape came out biased low with few exceedances of a Pareto
    tail, and the intervals missed. Vectorised over rows (a fit's resamples)."""
    k = y.shape[1]
    y = np.maximum(y, 1e-12)
    grid = 30 + int(math.sqrt(k))
    j = np.arange(1, grid + 1)
    quartile = y[:, max(0, int(k / 4 + 0.5) - 1)]
    theta = (1 - np.sqrt(grid / (j - 0.5)))[None, :] / (3 * quartile[:, None]) + 1 / y[:, -1:]
    mean_log = np.empty_like(theta)
    for begin in range(0, len(y), _ZS_ROWS):  # in blocks that stay in cache: 25x faster
        block = slice(begin, begin + _ZS_ROWS)
        mean_log[block] = np.log1p(-theta[block, :, None] * y[block, None, :]).mean(axis=2)
    with np.errstate(invalid="ignore", divide="ignore"):
        loglik = k * (np.log(-theta / mean_log) - mean_log - 1)
    loglik = np.where(np.isfinite(loglik), loglik, -np.inf)
    weight = np.exp(loglik - loglik.max(axis=1, keepdims=True))
    weight /= weight.sum(axis=1, keepdims=True)
    best = (theta * weight).sum(axis=1)
    xi = np.log1p(-best[:, None] * y).mean(axis=1)
    return np.clip(xi, -0.5, 0.95), -xi / best
