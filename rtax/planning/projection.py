"""The worker-hour projection model: pure functions, checked against the study's own figures.

Why a model at all (docs/measurement.md#projection): fleet planners ask "what does this substrate
cost me over a million trajectories?". The answer is
worker-hours = seconds per trajectory x count / 3600, where seconds per trajectory comes from
measurements:

- if trajectories of exactly the requested length were measured, their statistic of the episode
  time is used directly ("measured");
- else, if at least two lengths were measured, the line T(S) = fixed + S x per_action through the
  per-length statistics is used ("fitted");
- else the substrate lacks data for the projection, and the caller says so.

Totals use the mean (docs/measurement.md#statistics): N trajectories take N x mean seconds (the sum
of their times), whatever the distribution. N x p50 under-states a right-skewed one such as cold
starts: samples [1, 1, 1, 10] s over 1,000 rollouts take 3,250 s, not 1,000 x p50 = 1,000 s. So
the mean is the default everywhere a total is computed; p50 and p95 are offered only as named
what-ifs ("what if every rollout took the p50"), never as the total.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd

from rtax.analysis.stats import fit_trajectory, successful, summarize
from rtax.planning.published import Scenario

#: The statistic of a total: N x mean is the sum of N rollouts' times.
TOTAL = "mean"
#: Every statistic offered, the total first; the others are what-ifs.
STATISTICS = (TOTAL, "p50", "p95")
#: How each statistic is named wherever a projection is shown.
LABELS = {
    "mean": "mean (the total: N × mean = the sum)",
    "p50": "what if every rollout took the p50",
    "p95": "what if every rollout took the p95",
}


def worker_hours(seconds_per_trajectory: float, trajectories: float) -> float:
    """Worker-hours spent: the study's formula, overhead x count / 3600. A total only when
    `seconds_per_trajectory` is a mean (see the module docstring)."""
    return seconds_per_trajectory * trajectories / 3600.0


def scenario_hours(scenario: Scenario) -> float:
    """Worker-hours of a published scenario, recomputed from its inputs."""
    per_trajectory = scenario.per_rollout_s + scenario.per_action_s * scenario.steps
    return worker_hours(per_trajectory, scenario.rollouts)


def statistic(values: Sequence[float] | pd.Series, which: str) -> float:
    """mean, p50 or p95 of the finite values, as `rtax.analysis.stats` computes them; NaN if
    none."""
    if which not in STATISTICS:
        raise ValueError(f"statistic must be one of {', '.join(STATISTICS)}, got {which!r}")
    return summarize(values, (50, 95))[which]


@dataclass(frozen=True)
class Estimate:
    """Seconds per trajectory of one substrate at the requested length, and where it came from."""

    substrate: str
    seconds: float
    basis: str
    n: int
    fixed_s: float | None = None
    per_action_s: float | None = None


def estimates(
    runs: pd.DataFrame, steps: int, which: str = TOTAL, by: str = "substrate"
) -> tuple[dict[str, Estimate], dict[str, str]]:
    """Per substrate, an `Estimate` of a `steps`-action trajectory, and the substrates that lack
    data (with the reason). Only successful trajectory runs (steps > 0) count.

    `which` is the mean by default: seconds x count is then the total. With p50 or p95 the
    basis says "what-if", so a table never passes one off as a total."""
    if runs.empty:
        return {}, {}
    per_name: dict[str, tuple[dict[int, float], dict[int, int]]] = {}
    for name in sorted(runs[by].unique()):
        group = successful(runs[runs[by] == name])
        per_length = group[group["steps"] > 0].groupby("steps")["episode_s"]
        per_name[name] = (
            {int(s): statistic(v, which) for s, v in per_length},
            {int(s): len(v) for s, v in per_length},
        )
    return estimates_from(per_name, steps, which)


def estimates_from(
    per_name: dict[str, tuple[dict[int, float], dict[int, int]]], steps: int, which: str = TOTAL
) -> tuple[dict[str, Estimate], dict[str, str]]:
    """`estimates` from, per name, the statistic and the count of successful trajectory runs
    per length (what summaries give without the runs themselves)."""
    found: dict[str, Estimate] = {}
    lacking: dict[str, str] = {}
    for name, (points, counts) in per_name.items():
        if not points:
            lacking[name] = "no successful trajectory runs"
            continue
        what_if = "" if which == TOTAL else "what-if: "
        if steps in points:
            found[name] = Estimate(
                name, points[steps], f"{what_if}measured {which} at S={steps}", counts[steps]
            )
            continue
        fit = fit_trajectory(list(points), list(points.values()))
        if fit is None:
            only = ", ".join(str(s) for s in points)
            lacking[name] = f"only S={only} measured; a line needs two lengths"
            continue
        lengths = ",".join(str(s) for s in fit.steps)
        found[name] = Estimate(
            name,
            fit.predict(steps),
            f"{what_if}fitted {which} over S={lengths}",
            sum(counts.values()),
            fit.fixed_s,
            fit.per_action_s,
        )
    return found, lacking


def project(
    seconds: Mapping[str, float],
    *,
    trajectories: int,
    workers: int = 1,
    prices: Mapping[str, float] | None = None,
) -> pd.DataFrame:
    """Worker-hours, extra hours over the best, ratio to the best, wall-clock hours at
    `workers`-way parallelism and cost, one row per substrate, best first."""
    if trajectories < 0 or workers < 1:
        raise ValueError("trajectories must be >= 0 and workers >= 1")
    prices = prices or {}
    columns = [
        "substrate",
        "seconds_per_trajectory",
        "worker_hours",
        "extra_hours",
        "ratio_to_best",
        "wall_clock_hours",
        "price_per_hour",
        "cost",
    ]
    if not seconds:
        return pd.DataFrame(columns=columns)
    rows = []
    for name, secs in seconds.items():
        hours = worker_hours(secs, trajectories)
        price = prices.get(name, math.nan)
        rows.append(
            {
                "substrate": name,
                "seconds_per_trajectory": secs,
                "worker_hours": hours,
                "wall_clock_hours": hours / workers,
                "price_per_hour": price,
                "cost": hours * price,
            }
        )
    frame = pd.DataFrame(rows).sort_values("worker_hours", kind="stable").reset_index(drop=True)
    best = frame["worker_hours"].iloc[0]
    frame["extra_hours"] = frame["worker_hours"] - best
    frame["ratio_to_best"] = frame["worker_hours"] / best if best > 0 else math.nan
    return frame[columns]


def spread(values: Sequence[float]) -> float:
    """max / min of the finite, positive values (the study's "N x spread"); NaN if undefined."""
    arr = np.asarray(values, dtype=float)
    arr = arr[np.isfinite(arr) & (arr > 0)]
    if arr.size == 0:
        return math.nan
    return float(arr.max() / arr.min())


@dataclass(frozen=True)
class Crossover:
    """Below `steps` actions `cheaper_short` is faster; above it, `cheaper_long` is."""

    cheaper_short: str
    cheaper_long: str
    steps: float
    seconds: float


def crossovers(lines: Mapping[str, tuple[float, float]]) -> list[Crossover]:
    """Where one line T(S) = fixed + S x per_action overtakes another, for S > 0.

    `lines` maps a name to (fixed_s, per_action_s). Parallel lines never cross."""
    names = sorted(lines)
    found = []
    for i, a in enumerate(names):
        for b in names[i + 1 :]:
            (a0, a1), (b0, b1) = lines[a], lines[b]
            if a1 == b1:
                continue
            s = (b0 - a0) / (a1 - b1)
            if s <= 0 or not math.isfinite(s):
                continue
            # Below s, the one with the smaller fixed cost wins; above, the smaller slope.
            short, long_ = (a, b) if a0 < b0 else (b, a)
            found.append(Crossover(short, long_, s, a0 + a1 * s))
    return sorted(found, key=lambda c: c.steps)
