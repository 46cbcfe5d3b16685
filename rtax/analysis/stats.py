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
) -> pd.DataFrame:
    """Per group: runs (the substrate's attempts), n (successful samples of `metric`), success
    rate, mean, percentiles, and apart from them the harness errors (rtax's own failures)."""
    columns = [
        *by,
        "runs",
        "n",
        "success_rate",
        "mean",
        *(f"p{q:g}" for q in quantiles),
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
        row.update(summarize(ok[metric], quantiles))
        rows.append(row)
    return pd.DataFrame(rows, columns=columns)


def phase_summary(runs: pd.DataFrame, quantiles: Sequence[float] = (50, 95)) -> pd.DataFrame:
    """One row per phase and derived metric over successful runs: n, mean, percentiles.

    `success_rate` is the share of the substrate's attempts (harness errors left out), repeated
    on every row so it is never far from a latency figure.
    """
    ok = successful(runs) if len(runs) else runs
    rate = success_rate(runs) if len(runs) else math.nan
    rows = []
    for column in (*PHASE_COLUMNS, *METRIC_COLUMNS):
        values = ok.get(column, [])
        rows.append(
            {
                "phase": column.removesuffix("_s"),
                **summarize(values, quantiles),
                "success_rate": rate,
            }
        )
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
