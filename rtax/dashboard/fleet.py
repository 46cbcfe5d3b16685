"""The Projection page's fleet-planning tables: measured samples in, the pure models' answers out.

Why a module (docs/dashboard.md): the page stays thin (widgets and calls); choosing which
samples feed a model, and laying its answer out as a table with `n`, is tested here without
Streamlit. The models themselves are `rtax.planning.poolmodel`, `rtax.planning.steptime` and
`rtax.planning.pricing`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np
import pandas as pd

from rtax.analysis import envelope, stats, summaries
from rtax.planning import poolmodel, pricing

#: The columns of `plan_costs`.
PLAN_COLUMNS = (
    "series",
    "fidelity",
    "n",
    "wall_s",
    "actions_s",
    "floor_hours",
    "binding",
    "billed_hours",
    "useful_hours",
    "useful_share",
    "usd",
    "usd_per_million",
    "prices_unset",
)


#: The Projection's launch-path choice that keeps every path (each still its own series).
EVERY_PATH = "every path"


def on_path(frame: pd.DataFrame, path: str) -> pd.DataFrame:
    """The rows of `frame` (runs or summary rows) launched by `path` (`EVERY_PATH`: all).

    Why the Projection takes a path (docs/measurement.md#launch-paths): a fleet launched from
    snapshots pays the restore path's time to first command, not the cold one, so its
    worker-hours, step time and costs come from that path's samples; each launch type is a
    series of its own, so this only chooses which series feed the models."""
    if path == EVERY_PATH or frame.empty:
        return frame
    return frame[frame["launch_type"] == path]


def samples(runs: pd.DataFrame, metric: str, **where: Any) -> dict[str, np.ndarray]:
    """Per series, the finite `metric` of its successful runs (matching `where`, e.g. a tier
    and steps), largest n first: the raw samples a model resamples."""
    ok = stats.successful(runs) if not runs.empty else runs
    for column, value in where.items():
        ok = ok[ok[column] == value]
    found = {}
    for name, group in ok.groupby("series", sort=True) if not ok.empty else ():
        values = pd.to_numeric(group[metric], errors="coerce").to_numpy(dtype=float)
        values = values[np.isfinite(values)]
        if values.size:
            found[str(name)] = values
    return dict(sorted(found.items(), key=lambda kv: -kv[1].size))


def outcomes(
    runs: pd.DataFrame, metric: str, **where: Any
) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """Per series (matching `where`), the finite `metric` of its successful runs and that of
    its failed ones (NaN where a failure never got that far): what a step waits for, the
    failures the substrate answers for included (`rtax.planning.steptime.waits`; rtax's own,
    `stats.attempts`, are not the substrate's). Series with a success, largest first."""
    if runs.empty:
        return {}
    at = runs
    for column, value in where.items():
        at = at[at[column] == value]
    ok = samples(at, metric)
    failed = stats.attempts(at[at["status"] != "ok"])  # rtax's own failures hold no step
    found = {}
    for name, values in ok.items():
        of = failed[failed["series"] == name]
        times = pd.to_numeric(of[metric], errors="coerce").to_numpy(dtype=float)
        found[name] = (values, times)
    return found


def quiet(runs: pd.DataFrame) -> pd.DataFrame:
    """The runs no load run launched (``load_id`` NULL): cold starts as the scheduler probes
    them, one series at a time, not under a burst's contention (`refills` takes those from
    the load runs themselves)."""
    if runs.empty or "load_id" not in runs:
        return runs
    return runs[runs["load_id"].isna()]


def refills(
    quiet_s: np.ndarray,
    runs: pd.DataFrame,
    series: str,
    loads: pd.DataFrame,
    rollouts: pd.DataFrame,
    shape: str,
    claims: int,
    refill_concurrency: int,
) -> tuple[np.ndarray, float | None, float | None]:
    """The cold starts the pool model draws a load's refills from, the concurrency they stand
    for (None: `quiet_s`, the series' cold starts as probed), and the served rollouts' busy
    share that concurrency counts (`poolmodel.busy_share`; None: not measured, 1 assumed).

    A burst of `claims` contends with its own refills, which run slower than quiet ones
    (docs/measurement.md#warm-pool-model); when load runs (`rtax burst`, the Capacity page's
    points) measured this substrate's cold starts at several concurrencies, a burst draws from
    the level its refills run at (`poolmodel.contended_level`: the refills in flight and, for
    the share of that time they are busy, the rollouts of the claims they served, at most the
    claims), interpolated between the measured levels around it. The busy share is the
    series' own quiet cold rollouts' (their life after the first command over the time to
    it). Other shapes, or no load runs of this substrate: the quiet samples."""
    mine = runs[runs["series"] == series] if not runs.empty else runs
    if shape != "burst" or mine.empty:
        return quiet_s, None, None
    first = mine.iloc[0]
    sweep = envelope.cold_sweep(
        loads,
        rollouts,
        **{column: first[column] for column in ("substrate", "mode", "fidelity")},
    )
    if not sweep:
        return quiet_s, None, None
    ok = stats.successful(quiet(mine))  # not the load runs' own rollouts: they contended
    ok = ok[ok["steps"] == 0] if not ok.empty and (ok["steps"] == 0).any() else ok
    ttfc = pd.to_numeric(ok["time_to_first_command_s"], errors="coerce").dropna()
    wall = pd.to_numeric(ok["wall_s"], errors="coerce").dropna()
    busy = None
    if len(ttfc) and len(wall) and float(ttfc.median()) > 0:
        busy = poolmodel.busy_share(float(ttfc.median()), float(wall.median()))
    wanted = poolmodel.contended_level(claims, refill_concurrency, 1.0 if busy is None else busy)
    level, values = poolmodel.at_concurrency(sweep, wanted)
    return values, level, busy


def workloads(runs: pd.DataFrame) -> list[tuple[str, int]]:
    """(tier, steps) of the successful runs, trajectories first (the step-time section's
    choices: an RL rollout is a trajectory)."""
    ok = stats.successful(runs) if not runs.empty else runs
    if ok.empty:
        return []
    pairs = {(str(t), int(s)) for t, s in zip(ok["tier"], ok["steps"], strict=True)}
    return sorted(pairs, key=lambda p: (p[1] == 0, p[0], p[1]))


def _means(rows: pd.DataFrame, metric: str) -> pd.DataFrame:
    table = summaries.latency(rows, metric, ["series", "substrate", "fidelity"])
    return table[["series", "substrate", "fidelity", "n", "mean"]]


def plan_costs(
    rows: pd.DataFrame,
    substrates: Mapping[str, Any],
    *,
    trajectories: int,
    steps: int,
    workers: int,
    pool_size: int = 0,
) -> pd.DataFrame:
    """Per series at `steps` actions whose substrate has limits or prices configured: the
    plan's wall-clock floor, billed and useful hours and dollars (rtax.planning.pricing) from the
    series' mean wall, actions and time-to-first-command (summary rows). Totals use means."""
    at = rows[rows["steps"] == steps] if not rows.empty else rows
    if at.empty:
        return pd.DataFrame(columns=list(PLAN_COLUMNS))
    wall, actions = _means(at, "wall_s"), _means(at, "actions_s")
    ttfc = _means(at, "time_to_first_command_s").set_index("series")["mean"]
    actions = actions.set_index("series")["mean"]
    out = []
    for row in wall.itertuples(index=False):
        conf = substrates.get(row.substrate)
        if conf is None or (conf.limits == pricing.Limits() and not conf.prices.configured()):
            continue
        if not row.n or not math.isfinite(row.mean):
            continue
        try:
            floor = pricing.wall_clock_floor(
                trajectories, row.mean, limits=conf.limits, workers=workers, pool_size=pool_size
            )
        except ValueError as exc:  # a pool that takes every slot the account allows
            out.append({"series": row.series, "fidelity": row.fidelity, "binding": str(exc)})
            continue
        first = float(ttfc.get(row.series, 0.0))
        billed = pricing.billed_seconds(
            trajectories, row.mean, pool_size=pool_size, duration_s=floor.seconds, ttfc_s=first
        )
        useful = pricing.useful_seconds(trajectories, float(actions.get(row.series, math.nan)))
        usd = math.nan
        if conf.prices.configured():
            usd = pricing.dollars(conf.prices, billed.total_s, trajectories).total_usd
        out.append(
            {
                "series": row.series,
                "fidelity": row.fidelity,
                "n": int(row.n),
                "wall_s": row.mean,
                "actions_s": float(actions.get(row.series, math.nan)),
                "floor_hours": floor.seconds / 3600,
                "binding": floor.binding,
                "billed_hours": billed.total_s / 3600,
                "useful_hours": useful / 3600,
                "useful_share": useful / billed.total_s if billed.total_s else math.nan,
                "usd": usd,
                "usd_per_million": pricing.per_million(usd, trajectories),
                "prices_unset": ", ".join(conf.prices.unset()) or "-",
            }
        )
    return pd.DataFrame(out, columns=list(PLAN_COLUMNS))


def configured(substrates: Mapping[str, Any]) -> list[str]:
    """The configured substrates with limits or prices set."""
    return [
        name
        for name, conf in substrates.items()
        if conf.limits != pricing.Limits() or conf.prices.configured()
    ]


#: The columns of `per_success`.
SUCCESS_COLUMNS = (
    "series",
    "fidelity",
    "attempts",
    "success_rate",
    "attempts_per_success",
    "lived_s",
    "rounding_s",
    "leaked_s",
    "idle_pool_s",
    "usd_per_million_successful",
    "worker_hours_per_million_successful",
    "usd_per_million_env_hour",
    "difference",
    "billing",
)


def per_success(
    runs: pd.DataFrame,
    substrates: Mapping[str, Any],
    *,
    steps: int,
    retries: int,
    pool_size: int,
    pool_idle_s: float,
    leak_runs_on_s: float,
    rollouts: int,
) -> pd.DataFrame:
    """Per series at `steps` actions whose substrate has prices: dollars and worker-hours per
    1 M **successful** rollouts from its raw attempts (`rtax.planning.pricing.
    per_successful_rollout`): lifetimes (wall, create request to verified deletion) of the
    successes and of the failures the substrate answers for (`stats.attempts`), retried up to
    `retries` times; attempts whose cleanup failed ran on `leak_runs_on_s` until the reaper
    found them; a pool of `pool_size` idle `pool_idle_s` each over `rollouts`. Beside it, the
    environment-hour figure (mean successful lifetime x the hourly price) and how far apart."""
    at = stats.attempts(runs[runs["steps"] == steps]) if not runs.empty else runs
    out = []
    for (name, substrate), group in at.groupby(["series", "substrate"]) if not at.empty else ():
        conf = substrates.get(substrate)
        if conf is None or not conf.prices.configured():
            continue
        wall = pd.to_numeric(group["wall_s"], errors="coerce")
        done = group["status"] == "ok"
        ok, failed = wall[done].dropna().tolist(), wall[~done].fillna(0.0).tolist()
        if not ok:
            continue
        leaked = float((pd.to_numeric(group["cleanup_ok"], errors="coerce") == 0).mean())
        cost = pricing.per_successful_rollout(
            ok,
            failed,
            conf.prices,
            retries=retries,
            leaked_s_per_attempt=leaked * leak_runs_on_s,
            pool_size=pool_size,
            pool_idle_s=pool_idle_s,
            rollouts=rollouts,
        )
        out.append(
            {
                "series": name,
                "fidelity": group["fidelity"].iloc[0],
                "attempts": len(group),
                "success_rate": cost.success_rate,
                "attempts_per_success": cost.attempts_per_success,
                "lived_s": cost.lived_s,
                "rounding_s": cost.rounding_s,
                "leaked_s": cost.leaked_s,
                "idle_pool_s": cost.idle_pool_s,
                "usd_per_million_successful": cost.usd * 1e6,
                "worker_hours_per_million_successful": cost.worker_s * 1e6 / 3600,
                "usd_per_million_env_hour": cost.naive_usd * 1e6,
                "difference": cost.usd / cost.naive_usd - 1 if cost.naive_usd else math.nan,
                "billing": cost.billing.describe(),
            }
        )
    return pd.DataFrame(out, columns=list(SUCCESS_COLUMNS))
