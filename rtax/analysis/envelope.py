"""The envelope of a substrate under load: pure functions of load runs and their rollouts.

Why (docs/load.md#the-envelope): a fleet planner needs the creates/s and the concurrency a
substrate holds before its tail or its failures give way, measured, not assumed. From the
``load_runs`` rows and their rollouts (`rtax.store.loads`):

- `points`: per series (substrate, mode, fidelity, tier, steps) and concurrency, the complete
  load runs pooled: time-to-first-command p50/p95 over the successful rollouts (raw samples,
  with `n`, one percentile rule: `rtax.analysis.stats`), the failure rate over the substrate's
  attempts (rtax's own ``harness_error`` left out, as everywhere), the mean achieved
  creates/s, and whether the client itself was saturated (`saturation`);
- `cold_sweep`: one substrate's raw time-to-first-command samples per concurrency, what the
  warm-pool model draws a burst's refills from (docs/measurement.md#warm-pool-model);
- `fit`: per series, the first concurrency and the first creates/s (in ascending order) at
  which p95 or the failure rate breaks the `Bounds`, and the largest that held below it.

The p95 bound is the tighter of an absolute one (if configured) and a ratio to the p95 at the
lowest concurrency measured (the series' own baseline: 2x by default), so one default suits a
local directory and a cloud VM alike.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from rtax.analysis import stats
from rtax.core.series import DIMENSIONS


@dataclass(frozen=True)
class Bounds:
    """What breaks a substrate's envelope (docs/load.md#the-envelope): time-to-first-command
    p95 above `ttfc_p95_max_s` (unset: no absolute bound) or above `ttfc_p95_ratio_max` times
    the p95 at the lowest concurrency measured, or a failure rate above `failure_rate_max`."""

    ttfc_p95_max_s: float | None = None
    ttfc_p95_ratio_max: float = 2.0
    failure_rate_max: float = 0.05


#: The series of a load run (`rtax.core.series`) less its launch type and vantage, which a
#: load run does not record: `rtax burst` launches cold starts from this host (docs/load.md).
SERIES: tuple[str, ...] = tuple(d for d in DIMENSIONS if d not in ("launch_type", "vantage"))
#: CPU seconds per second at which the harness counts as saturated: its Python threads share
#: one interpreter lock, so about one core is all they get, whatever the host has.
SATURATED_CPU_CORES = 0.8
#: Median dispatch lag, as a share of the time-to-first-command p50, at which the client counts
#: as saturated: launches then leave noticeably later than the shape asked.
SATURATED_LAG_SHARE = 0.10

POINT_COLUMNS: tuple[str, ...] = (
    *SERIES,
    "concurrency",
    "loads",
    "creates_per_s",
    "runs",
    "failed",
    "failure_rate",
    "n",
    "ttfc_p50_s",
    "ttfc_p95_s",
    "harness_cpu_cores",
    "dispatch_lag_p50_s",
    "saturated",
)
ENVELOPE_COLUMNS: tuple[str, ...] = (
    *SERIES,
    "points",
    "baseline_p95_s",
    "p95_limit_s",
    "failure_rate_max",
    "held_concurrency",
    "break_concurrency",
    "held_creates_per_s",
    "break_creates_per_s",
    "broken_by",
    "saturated",
)


def saturation(cpu_cores: float | None, lag_p50_s: float | None, ttfc_p50_s: float) -> str:
    """Why the client may have set a load run's figures ("" when it did not)."""
    why = []
    if cpu_cores is not None and not math.isnan(cpu_cores) and cpu_cores >= SATURATED_CPU_CORES:
        why.append(f"harness CPU {cpu_cores:.2f} of a core")
    if (
        lag_p50_s is not None
        and not math.isnan(lag_p50_s)
        and not math.isnan(ttfc_p50_s)
        and lag_p50_s > SATURATED_LAG_SHARE * ttfc_p50_s
    ):
        why.append(f"dispatch lag p50 {lag_p50_s * 1000:.1f} ms")
    return "; ".join(why)


def points(loads: pd.DataFrame, rollouts: pd.DataFrame) -> pd.DataFrame:
    """One row per series and concurrency (`POINT_COLUMNS`), from the complete load runs in
    `loads` and their rollouts (by ``load_id``); ordered by series, then concurrency."""
    if loads.empty:
        return pd.DataFrame(columns=list(POINT_COLUMNS))
    done = loads[loads["status"] == "complete"]
    rows = []
    for key, group in done.groupby([*SERIES, "concurrency"], sort=True, dropna=False):
        mine = rollouts[rollouts["load_id"].isin(group["load_id"])]
        attempts = stats.attempts(mine)
        ok = mine[mine["status"] == "ok"]
        ttfc = ok["time_to_first_command_s"] if not ok.empty else []
        p50 = stats.percentile(ttfc, 50)
        cpu = _max(group["harness_cpu_cores"])
        lag = _max(group["dispatch_lag_p50_s"])
        failed = int((attempts["status"] != "ok").sum()) if not attempts.empty else 0
        rows.append(
            {
                **dict(zip([*SERIES, "concurrency"], key, strict=True)),
                "loads": len(group),
                "creates_per_s": _mean(group["creates_per_s"]),
                "runs": len(attempts),
                "failed": failed,
                "failure_rate": failed / len(attempts) if len(attempts) else math.nan,
                "n": stats.summarize(ttfc, ())["n"],
                "ttfc_p50_s": p50,
                "ttfc_p95_s": stats.percentile(ttfc, 95),
                "harness_cpu_cores": cpu,
                "dispatch_lag_p50_s": lag,
                "saturated": saturation(cpu, lag, p50),
            }
        )
    return pd.DataFrame(rows, columns=list(POINT_COLUMNS))


def cold_sweep(loads: pd.DataFrame, rollouts: pd.DataFrame, **series: Any) -> dict[int, np.ndarray]:
    """{concurrency: the finite time to first command of every successful rollout} over the
    complete load runs of one substrate (`series`: any of `SERIES`, e.g. substrate, mode and
    fidelity), every tier pooled: the cold starts measured with that many rollouts at once.

    Why raw samples and not `points`' percentiles: the pool model resamples them as a burst's
    refills, and refills run slower under a burst than when quiet (bench_pool measured -41% when
    fed quiet cold starts), so the page draws them from the level nearest the burst."""
    if loads.empty or rollouts.empty:
        return {}
    done = loads[loads["status"] == "complete"]
    for column, value in series.items():
        if column not in SERIES:
            raise ValueError(f"{column!r} is not a load run's series column ({SERIES})")
        done = done[done[column] == value]
    ok = rollouts[rollouts["status"] == "ok"]
    found: dict[int, np.ndarray] = {}
    for level, group in done.groupby("concurrency", sort=True):
        mine = ok[ok["load_id"].isin(group["load_id"])]
        values = pd.to_numeric(mine["time_to_first_command_s"], errors="coerce").to_numpy(float)
        values = values[np.isfinite(values)]
        if values.size:
            found[int(level)] = values
    return found


def breaks(point: dict[str, Any], p95_limit_s: float, bounds: Bounds) -> str:
    """Which bound a point breaks ("" when it holds)."""
    why = []
    p95 = point["ttfc_p95_s"]
    if not math.isnan(p95_limit_s) and not math.isnan(p95) and p95 > p95_limit_s:
        why.append(f"TTFC p95 {p95:.3g} s > {p95_limit_s:.3g} s")
    rate = point["failure_rate"]
    if not math.isnan(rate) and rate > bounds.failure_rate_max:
        why.append(f"failures {rate:.0%} > {bounds.failure_rate_max:.0%}")
    return "; ".join(why)


def fit(table: pd.DataFrame, bounds: Bounds | None = None) -> pd.DataFrame:
    """Per series (`ENVELOPE_COLUMNS`): where the `points` of `table` first break `bounds`, in
    order of concurrency and, apart, of achieved creates/s; the largest value that held below
    each break (NaN when the first point already breaks). No break: the break columns are
    NaN and the held ones the largest measured."""
    bounds = bounds if bounds is not None else Bounds()
    rows = []
    if table.empty:
        return pd.DataFrame(columns=list(ENVELOPE_COLUMNS))
    for key, group in table.groupby(list(SERIES), sort=True, dropna=False):
        group = group.sort_values("concurrency")
        baseline = float(group["ttfc_p95_s"].iloc[0])
        limits = [bounds.ttfc_p95_max_s] if bounds.ttfc_p95_max_s is not None else []
        if not math.isnan(baseline):
            limits.append(baseline * bounds.ttfc_p95_ratio_max)
        limit = min(limits) if limits else math.nan
        verdicts = [breaks(p, limit, bounds) for p in group.to_dict("records")]
        held_c, break_c, why_c = _first_break(list(group["concurrency"]), verdicts)
        by_rate = group.assign(verdict=verdicts).dropna(subset=["creates_per_s"])
        by_rate = by_rate.sort_values("creates_per_s")
        held_r, break_r, why_r = _first_break(
            list(by_rate["creates_per_s"]), list(by_rate["verdict"])
        )
        saturated = [s for s in group["saturated"] if s]
        rows.append(
            {
                **dict(zip(SERIES, key, strict=True)),
                "points": len(group),
                "baseline_p95_s": baseline,
                "p95_limit_s": limit,
                "failure_rate_max": bounds.failure_rate_max,
                "held_concurrency": held_c,
                "break_concurrency": break_c,
                "held_creates_per_s": held_r,
                "break_creates_per_s": break_r,
                "broken_by": why_c or why_r,
                "saturated": "; ".join(dict.fromkeys(saturated)),
            }
        )
    return pd.DataFrame(rows, columns=list(ENVELOPE_COLUMNS))


def _first_break(values: Sequence[float], verdicts: Sequence[str]) -> tuple[float, float, str]:
    """(largest value held before the first break, the first breaking value, why), values
    ascending; NaN where there is none."""
    held = math.nan
    for value, verdict in zip(values, verdicts, strict=True):
        if verdict:
            return held, float(value), verdict
        held = float(value)
    return held, math.nan, ""


def _mean(values: pd.Series) -> float:
    finite = pd.to_numeric(values, errors="coerce").dropna()
    return float(finite.mean()) if len(finite) else math.nan


def _max(values: pd.Series) -> float:
    finite = pd.to_numeric(values, errors="coerce").dropna()
    return float(finite.max()) if len(finite) else math.nan
