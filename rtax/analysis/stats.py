"""Statistics over raw samples: pure functions of DataFrames and numbers, nothing else.

Why pure (docs/measurement.md#statistics): the CLI, the dashboard and the tests must compute the
same figure from the same samples, and tests feed these functions hand-made numbers. Rules kept
here:

- percentiles come from raw samples and always travel with their ``n``;
- failed rollouts never enter latency statistics; the success rate stands beside every figure;
- percentiles of phases do not add up, so stacked decompositions use means (`phase_means`).

Percentiles use linear interpolation between closest ranks (numpy's default, Hyndman & Fan type 7):
rank h = q/100 x (n - 1), value = x[floor h] + (h - floor h) x (x[floor h + 1] - x[floor h]). It is
the one percentile rule of rtax: `rtax.analysis.sketch` reads rolled-up history back with `ranks`
and `lerp` below, so history and fresh data agree on the same samples.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd

# The parts of wall time and the derived per-run metrics shown beside them (rtax.core.record).
from rtax.core.failures import OWN_ERRORS
from rtax.core.record import METRIC_COLUMNS, PHASE_COLUMNS
from rtax.core.series import (
    DIMENSIONS,
    LOCAL_VANTAGE,
    MISSING,
    series_name,
    workload_name,
)

QUANTILES = (50, 95, 99)


def percentile(values: Iterable[float], q: float) -> float:
    """The q-th percentile (0..100) of the finite values; NaN when there are none."""
    if not 0 <= q <= 100:
        raise ValueError(f"q must be within 0..100, got {q}")
    arr = _finite(values)
    if arr.size == 0:
        return math.nan
    return float(np.percentile(arr, q))


def ranks(q: float, n: int) -> tuple[int, int, float]:
    """The two closest ranks (0-based) of the q-th percentile of n > 0 sorted samples and the
    weight of the upper one, exactly as numpy's "linear" method computes them (so that a value
    read through `lerp` equals `np.percentile` bit for bit)."""
    h = (n - 1) * (q / 100)
    if h >= n - 1:
        return n - 1, n - 1, 0.0
    lower = math.floor(h)
    return lower, lower + 1, h - lower


def lerp(a: float, b: float, t: float) -> float:
    """a + t (b - a), written as numpy's quantile does (from the nearer end, so t = 1 gives b
    exactly)."""
    diff = b - a
    return b - diff * (1 - t) if t >= 0.5 else a + diff * t


def summarize(values: Iterable[float], quantiles: Sequence[float] = QUANTILES) -> dict[str, float]:
    """n, mean and the requested percentiles of the finite values."""
    arr = _finite(values)
    out: dict[str, float] = {
        "n": int(arr.size),
        "mean": float(arr.mean()) if arr.size else math.nan,
    }
    for q in quantiles:
        out[f"p{q:g}"] = percentile(arr, q)
    return out


#: The fewest samples p99 is reported from: 100 / (100 - 99), so that on average one sample lies
#: at or beyond it. Below it a page says "n too small" instead of a figure that is a few
#: samples' maximum in disguise (docs/measurement.md#tails). p50 and p95 are shown from any n,
#: always with it.
P99_MIN_N = 100
#: The nominal level of `quantile_interval`.
INTERVAL_LEVEL = 0.95


def shown(q: float, n: int) -> bool:
    """Whether the q-th percentile of n samples is reported (`P99_MIN_N` for p99 and beyond)."""
    return n >= 1 and (q < 99 or n >= P99_MIN_N)


def reported(q: float, n: int, value: float) -> float:
    """`value`, the q-th percentile of n samples, where `shown`; NaN (a page's "n too small")
    where it isn't."""
    return value if shown(q, n) else math.nan


def interval_columns(quantiles: Sequence[float]) -> list[str]:
    """The interval columns a table with `intervals` adds: ``p<q>_lo``, ``p<q>_hi`` for each
    tail quantile (95 and beyond; a median's interval is not what a page hovers for)."""
    return [f"p{q:g}_{end}" for q in quantiles if q >= 95 for end in ("lo", "hi")]


def _binomial_cdf(n: int, p: float) -> tuple[int, np.ndarray]:
    """(k0, P(B <= k) for k = k0, k0 + 1, ...) of B ~ Binomial(n, p), over the k within ten
    standard deviations of the mean (beyond them the mass is below 1e-20, so P(B < k0) is
    taken as 0): exact terms from lgamma, so no special-function library is needed and the
    cost is O(sqrt n), not O(n)."""
    spread = 10 * math.sqrt(n * p * (1 - p)) + 2
    k0 = max(0, math.floor(n * p - spread))
    k1 = min(n, math.ceil(n * p + spread))
    k = np.arange(k0, k1 + 1)
    log_p = (
        math.lgamma(n + 1)
        - np.array([math.lgamma(i + 1) + math.lgamma(n - i + 1) for i in k.tolist()])
        + k * math.log(p)
        + (n - k) * math.log1p(-p)
    )
    return k0, np.cumsum(np.exp(log_p))


@functools.lru_cache(maxsize=4096)  # a page asks for the same (q, n) bucket after bucket
def interval_ranks(q: float, n: int, level: float = INTERVAL_LEVEL) -> tuple[int, int] | None:
    """The 0-based ranks (lo, hi) of the order-statistic interval of the q-th percentile of n
    sorted samples, or None where the sample can't bound it (too few beyond it).

    Why this interval: the true q-quantile lies at or above the j-th smallest of n independent
    samples exactly when at most j - 1 of them fall below it, a Binomial(n, q/100) count, so
    P(x_lo <= quantile <= x_hi) >= `level` for any continuous distribution, needing only the
    value at a rank, which a sketch answers (`rtax.analysis.sketch.Sketch.interval`). It is
    what the bootstrap of a quantile approximates; that bootstrap (the percentile interval,
    resamples drawn exactly on ranks) was measured first and covers too little where the tail
    is thin: p99 from 300 lognormal samples 77 %, p95 from 100 bimodal 87 %; this one holds
    94-98 % on every family tested (docs/measurement.md#tails, tests/test_stats.py). None
    when the upper rank would pass the largest sample: no sample then bounds the quantile
    with that confidence."""
    if not 0 < q < 100 or n < 2 or not 0 < level < 1:
        return None
    tail = (1 - level) / 2
    k0, cdf = _binomial_cdf(n, q / 100)
    # 1-based: lo = the largest j with P(B < j) <= tail; hi = the smallest j with P(B >= j) <= tail.
    below = np.concatenate(([0.0], cdf))  # below[i] = P(B < k0 + i)
    lo_candidates = np.nonzero(below <= tail)[0]
    hi_candidates = np.nonzero(1 - below <= tail)[0]
    if lo_candidates.size == 0 or hi_candidates.size == 0:
        return None
    lo = k0 + int(lo_candidates[-1])  # 1-based rank (P(B < lo) <= tail)
    hi = k0 + int(hi_candidates[0])  # 1-based rank (P(B >= hi) <= tail)
    if lo < 1 or hi > n:  # no rank of the sample bounds it with that confidence
        return None
    return lo - 1, hi - 1


def quantile_interval(
    values: Iterable[float], q: float, level: float = INTERVAL_LEVEL
) -> tuple[float, float] | None:
    """The order-statistic interval (`interval_ranks`) of the q-th percentile of the finite
    values, or None where the sample can't bound it."""
    arr = np.sort(_finite(values))
    at = interval_ranks(q, int(arr.size), level)
    return None if at is None else (float(arr[at[0]]), float(arr[at[1]]))


def _finite(values: Iterable[float]) -> np.ndarray:
    arr = np.asarray(
        list(values) if not isinstance(values, (np.ndarray, pd.Series)) else values, dtype=float
    )
    return arr[np.isfinite(arr)]


def successful(runs: pd.DataFrame) -> pd.DataFrame:
    """Only the runs that may enter latency statistics."""
    return runs[runs["status"] == "ok"]


def attempts(runs: pd.DataFrame) -> pd.DataFrame:
    """The runs a substrate answers for: all but rtax's own failures (`OWN_ERRORS`), which are
    shown apart and never lower a success rate."""
    if "error_class" not in runs:
        return runs
    return runs[~runs["error_class"].isin(OWN_ERRORS)]


def success_rate(runs: pd.DataFrame) -> float:
    """Successful runs / the substrate's attempts (`attempts`); NaN when there are none."""
    counted = attempts(runs)
    return len(successful(counted)) / len(counted) if len(counted) else math.nan


def latency_table(
    runs: pd.DataFrame,
    metric: str,
    by: Sequence[str] = DIMENSIONS,
    quantiles: Sequence[float] = QUANTILES,
    *,
    intervals: bool = False,
) -> pd.DataFrame:
    """Per group: runs (the substrate's attempts), n (successful samples of `metric`), success
    rate, mean, percentiles (p99 only where `shown`), and apart from them the harness errors
    (rtax's own failures); with `intervals`, the interval of each tail percentile
    (`quantile_interval`, `interval_columns`; NaN where the sample can't bound it)."""
    columns = [
        *by,
        "runs",
        "n",
        "success_rate",
        "mean",
        *(f"p{q:g}" for q in quantiles),
        *(interval_columns(quantiles) if intervals else ()),
        "harness_errors",
    ]
    if runs.empty:
        return pd.DataFrame(columns=columns)
    rows = []
    for key, group in runs.groupby(list(by), sort=True, dropna=False):
        key = key if isinstance(key, tuple) else (key,)
        ok = successful(group)
        counted = attempts(group)
        row = dict(zip(by, key, strict=True))
        row.update(
            runs=len(counted),
            success_rate=success_rate(group),
            harness_errors=len(group) - len(counted),
        )
        values = _finite(ok[metric])
        row.update(summarize(values, quantiles))
        for q in quantiles:
            row[f"p{q:g}"] = reported(q, row["n"], row[f"p{q:g}"])
            if intervals and q >= 95:
                found = quantile_interval(values, q) if shown(q, values.size) else None
                row[f"p{q:g}_lo"], row[f"p{q:g}_hi"] = found or (math.nan, math.nan)
        rows.append(row)
    return pd.DataFrame(rows, columns=columns)


def phase_summary(runs: pd.DataFrame, quantiles: Sequence[float] = (50, 95)) -> pd.DataFrame:
    """One row per phase and derived metric over successful runs: n, mean, percentiles (p99
    only where `shown`).

    `success_rate` is the share of the substrate's attempts (harness errors left out), repeated
    on every row so it is never far from a latency figure.
    """
    ok = successful(runs) if len(runs) else runs
    rate = success_rate(runs) if len(runs) else math.nan
    rows = []
    for column in (*PHASE_COLUMNS, *METRIC_COLUMNS):
        found = summarize(ok.get(column, []), quantiles)
        for q in quantiles:
            found[f"p{q:g}"] = reported(q, found["n"], found[f"p{q:g}"])
        rows.append({"phase": column.removesuffix("_s"), **found, "success_rate": rate})
    return pd.DataFrame(rows)


def phase_means(runs: pd.DataFrame, by: Sequence[str] = DIMENSIONS) -> pd.DataFrame:
    """Mean seconds of each phase per group over successful runs, with n. Means add up;
    percentiles don't, which is why stacked bars use this."""
    ok = successful(runs)
    columns = [*by, "n", *PHASE_COLUMNS]
    if ok.empty:
        return pd.DataFrame(columns=columns)
    grouped = ok.groupby(list(by), sort=True, dropna=False)
    means = grouped[list(PHASE_COLUMNS)].mean().reset_index()
    means.insert(len(by), "n", grouped.size().to_numpy())
    return means[columns]


def amortized_per_action(runs: pd.DataFrame) -> pd.Series:
    """Trajectory time divided by its number of actions, per successful run."""
    ok = successful(runs)
    ok = ok[ok["n_actions"] > 0]
    return ok["episode_s"] / ok["n_actions"]


@dataclass(frozen=True)
class TrajectoryFit:
    """T(S) = fixed_s + S * per_action_s, fitted by least squares on successful trajectories."""

    fixed_s: float
    per_action_s: float
    n: int
    r2: float
    steps: tuple[int, ...]

    def predict(self, steps: float) -> float:
        return self.fixed_s + steps * self.per_action_s


def fit_trajectory(steps: Sequence[float], times: Sequence[float]) -> TrajectoryFit | None:
    """Least-squares line through (steps, time); None unless two distinct step counts exist."""
    x = np.asarray(steps, dtype=float)
    y = np.asarray(times, dtype=float)
    keep = np.isfinite(x) & np.isfinite(y)
    x, y = x[keep], y[keep]
    if np.unique(x).size < 2:
        return None
    per_action, fixed = np.polyfit(x, y, 1)
    residual = y - (fixed + per_action * x)
    total = float(((y - y.mean()) ** 2).sum())
    r2 = 1.0 - float((residual**2).sum()) / total if total > 0 else 1.0
    return TrajectoryFit(
        float(fixed),
        float(per_action),
        int(x.size),
        r2,
        tuple(sorted(int(s) for s in np.unique(x))),
    )


def trajectory_fits(runs: pd.DataFrame, by: str = "series") -> dict[str, TrajectoryFit | None]:
    """A fit per series (substrate · mode · launch [fidelity]) over its successful trajectory runs
    (steps > 0), on episode time."""
    if by == "series" and "series" not in runs:
        runs = add_series(runs)
    ok = successful(runs)
    ok = ok[ok["steps"] > 0]
    return {
        name: fit_trajectory(group["steps"], group["episode_s"])
        for name, group in ok.groupby(by, sort=True)
    }


#: Appended to the series label of runs whose workload toolchain is not the local floor's.
NOT_COMPARABLE = " (toolchain ≠ floor)"


def comparable(runs: pd.DataFrame, floor: str | None) -> pd.Series:
    """Which runs ran the local floor's workload toolchain (docs/toolchain.md).

    A run whose toolchain digest differs from `floor`, or is unknown, timed other programs and
    is not comparable. With no floor measured yet there is nothing to differ from: every run
    counts as comparable."""
    if floor is None or "toolchain" not in runs:
        return pd.Series(True, index=runs.index)
    return runs["toolchain"].eq(floor)


def add_series(runs: pd.DataFrame, floor: str | None = None) -> pd.DataFrame:
    """`runs` with a `series` column, so that modes, fidelities, launch types (cold, warm) and
    vantages are never mixed silently,
    a `comparable` column (the floor's toolchain, see `comparable`; the label of a run that is
    not says so, so that it never merges into a comparable series), and a `workload` column
    (tier, or tier and trajectory length). Vectorized: it runs on every dashboard read of up
    to 100,000 runs."""
    out = runs.copy()
    if out.empty:
        out["series"] = pd.Series(dtype=str)
        out["workload"] = pd.Series(dtype=str)
        out["comparable"] = pd.Series(dtype=bool)
        return out
    out["comparable"] = comparable(out, floor).to_numpy()
    # The rules of `Series.name` / `Series.workload`, applied once per distinct key and mapped back
    # (a few keys, up to 100,000 runs: the dashboard reads this on every page).
    launch = out["launch_type"] if "launch_type" in out else pd.Series("cold", index=out.index)
    vantage = out["vantage"] if "vantage" in out else pd.Series(LOCAL_VANTAGE, index=out.index)
    codes, keys = pd.factorize(
        pd.MultiIndex.from_arrays(
            [
                out["substrate"],
                out["mode"].fillna(MISSING["mode"]),
                out["fidelity"].fillna(MISSING["fidelity"]),
                launch.fillna(MISSING["launch_type"]),
                vantage.fillna(MISSING["vantage"]),
            ]
        )
    )
    out["series"] = np.array([series_name(*k) for k in keys], dtype=object)[codes]
    out.loc[~out["comparable"], "series"] += NOT_COMPARABLE
    codes, keys = pd.factorize(
        pd.MultiIndex.from_arrays([out["tier"], out["steps"].fillna(0).astype(int)])
    )
    out["workload"] = np.array([workload_name(*k) for k in keys], dtype=object)[codes]
    return out
