"""The pages' tables from per-series summaries (rtax.analysis.summaries): the same columns and rules
as `rtax.dashboard.tables` computes from raw runs, without reading every run.

Why a twin and not a replacement: `tables` stays the definition (tests compare the two on the
same samples); this module answers it from counts, sums and sketches merged over the hours of the
window. Percentiles: exact while a row merges at most `sketch.EXACT_LIMIT` samples, within
`sketch.ALPHA` (1%) beyond; means, n, success rates and harness errors are exact.
"""

from __future__ import annotations

import math
from datetime import UTC, datetime

import pandas as pd

from rtax.analysis import stats, summaries
from rtax.core.record import PHASE_COLUMNS
from rtax.core.series import DIMENSIONS, series_name, workload_name
from rtax.dashboard.tables import GROUP, OVERVIEW_COLUMNS, PHASES, TAILS, _age, _tails, disclosed
from rtax.planning import projection

#: The metrics the Overview reads.
OVERVIEW_METRICS = ("time_to_first_command_s", "episode_s", "wall_s")


def totals(rows: pd.DataFrame) -> tuple[int, int]:
    """(runs, successful runs) in the summary rows, harness errors included in runs (as the
    Overview's caption counts them)."""
    merged = summaries.combine(rows[rows["metric"] == "wall_s"], ["metric"])
    if merged.empty:
        return 0, 0
    return int(merged["runs"].iloc[0]), int(merged["ok"].iloc[0])


def _disclose(table: pd.DataFrame, against: str) -> list[float]:
    return [disclosed(r, v) for r, v in zip(table["res_max"], table[against], strict=True)]


def overview(rows: pd.DataFrame, now: datetime | None = None) -> pd.DataFrame:
    """`tables.overview` from summary rows."""
    by = [*GROUP, "fidelity"]
    ttfc = summaries.latency(rows, "time_to_first_command_s", by, TAILS, intervals=True)
    episode = summaries.latency(rows, "episode_s", by, TAILS)
    if ttfc.empty:
        return pd.DataFrame(columns=list(OVERVIEW_COLUMNS))
    wall = summaries.combine(rows[rows["metric"] == "wall_s"], [*GROUP, "metric"])
    out = ttfc[[*GROUP, "fidelity", "runs", "success_rate", "harness_errors"]].copy()
    _tails(out, "ttfc", ttfc, intervals=True)
    out["ttfc_res_s"] = _disclose(ttfc, "p50")
    _tails(out, "episode", episode)
    out["episode_res_s"] = _disclose(episode, "p50")
    out["last_probe_age_s"] = _age(wall["last_started_at"], now or datetime.now(UTC)).to_numpy()
    return out[list(OVERVIEW_COLUMNS)].reset_index(drop=True)


def cold_start(rows: pd.DataFrame) -> pd.DataFrame:
    """`tables.cold_start` from the summary rows of one tier's fixed script."""
    table = summaries.latency(rows, "episode_s", ["series", "fidelity"], TAILS, intervals=True)
    table["res_s"] = _disclose(table, "p50") if not table.empty else []
    table = table.drop(columns=["res_max"])
    return table.sort_values("p50", na_position="last").reset_index(drop=True)


def cold_start_all(rows: pd.DataFrame) -> pd.DataFrame:
    """`tables.cold_start_all` from summary rows."""
    fixed = rows[rows["steps"] == 0] if not rows.empty else rows
    parts = []
    for tier in sorted(fixed["tier"].unique()) if not fixed.empty else []:
        table = cold_start(fixed[fixed["tier"] == tier])
        table.insert(0, "tier", tier)
        parts.append(table)
    if not parts:
        columns = ["tier", "series", "fidelity", "runs", "n", "success_rate", "mean"]
        ends = stats.interval_columns(TAILS)
        return pd.DataFrame(columns=[*columns, "p50", "p95", "p99", *ends, "res_s"])
    return pd.concat(parts, ignore_index=True)


def phase_means(rows: pd.DataFrame) -> pd.DataFrame:
    """`stats.phase_means(runs, by=("series", "workload"))` from summary rows: per group the
    successful runs (n) and each phase's mean (sum / n of its samples)."""
    by = ["series", "workload"]
    columns = [*by, "n", *PHASE_COLUMNS]
    if rows.empty:
        return pd.DataFrame(columns=columns)
    merged = summaries.combine(rows[rows["metric"].isin(PHASE_COLUMNS)], [*by, "metric"])
    merged = merged[merged["ok"] > 0]
    if merged.empty:
        return pd.DataFrame(columns=columns)
    merged["mean"] = merged["sum"] / merged["n"].where(merged["n"] > 0)
    wide = merged.pivot(index=by, columns="metric", values="mean").reset_index()
    ok = merged.groupby(by, sort=True)["ok"].first().reset_index()
    out = ok.merge(wide, on=by).rename(columns={"ok": "n"})
    return out.reindex(columns=columns)


def phase_percentiles(rows: pd.DataFrame) -> pd.DataFrame:
    """`tables.phase_percentiles` from summary rows."""
    columns = [
        *("series", "workload", "phase", "n", "p50", "p95", "p99"),
        *("res_s", "mean", "success_rate"),
    ]
    parts = []
    for phase in PHASES:
        table = summaries.latency(rows, f"{phase}_s", ["series", "workload"], TAILS)
        if table.empty:
            continue
        table["phase"] = phase
        table["res_s"] = _disclose(table, "p50")
        parts.append(table)
    if not parts:
        return pd.DataFrame(columns=columns)
    order = {p: i for i, p in enumerate(PHASES)}
    out = pd.concat(parts, ignore_index=True)
    out["_order"] = out["phase"].map(order)
    out = out.sort_values(["series", "workload", "_order"]).reset_index(drop=True)
    return out[columns]


def milestones(rows: pd.DataFrame) -> pd.DataFrame:
    """``store.runs.milestone_means()`` (with its series and workload labels) from summary
    rows."""
    by = list(DIMENSIONS)
    columns = [*by, "milestone", "mean_t_s", "n", "series", "workload"]
    picked = rows[rows["metric"].str.startswith(summaries.MILESTONE)] if not rows.empty else rows
    merged = summaries.combine(picked, [*by, "metric"])
    if merged.empty:
        return pd.DataFrame(columns=columns)
    merged["milestone"] = merged["metric"].str.removeprefix(summaries.MILESTONE)
    merged["mean_t_s"] = merged["sum"] / merged["n"]
    merged["series"] = [
        series_name(*k)
        for k in zip(
            merged["substrate"],
            merged["mode"],
            merged["fidelity"],
            merged["launch_type"],
            merged["vantage"],
            strict=True,
        )
    ]
    merged["workload"] = [
        workload_name(t, s) for t, s in zip(merged["tier"], merged["steps"], strict=True)
    ]
    return merged.sort_values([*by, "mean_t_s"]).reset_index(drop=True)[columns]


def _points(rows: pd.DataFrame) -> pd.DataFrame:
    """Per series and trajectory length (> 0): the episode rows merged (mean, sketch, sums)."""
    traj = rows[(rows["steps"] > 0) & (rows["metric"] == "episode_s")] if not rows.empty else rows
    return summaries.combine(traj, ["series", "steps", "metric"])


def _statistic(row: pd.Series, which: str) -> float:
    if which == projection.TOTAL:
        return row["sum"] / row["n"] if row["n"] else math.nan
    return row["sketch"].quantile(float(which.removeprefix("p")))


def trajectory_points(rows: pd.DataFrame, which: str = projection.TOTAL) -> pd.DataFrame:
    """`tables.trajectory_points` from summary rows."""
    columns = ["series", "steps", "runs", "n", "success_rate", "seconds", "res_s", "per_action_s"]
    out = []
    for _, row in _points(rows).iterrows():
        value = _statistic(row, which)
        out.append(
            {
                "series": row["series"],
                "steps": int(row["steps"]),
                "runs": int(row["attempts"]),
                "n": int(row["n"]),
                "success_rate": row["ok"] / row["attempts"] if row["attempts"] else math.nan,
                "seconds": value,
                "res_s": disclosed(row["res_max"], value),
                "per_action_s": value / row["steps"],
            }
        )
    return pd.DataFrame(out, columns=columns)


def trajectory_fit(points: pd.DataFrame) -> stats.TrajectoryFit | None:
    """`stats.fit_trajectory` over every successful run of one series, from per-length n, sum
    and sum of squares (the normal equations of least squares need no more); r² is NaN where a
    length's sum of squares is unknown (folded history summarized from rollups)."""
    points = points[points["n"] > 0]
    if points["steps"].nunique() < 2:
        return None
    x, n, sy, syy = (points[c].astype(float) for c in ("steps", "n", "sum", "sumsq"))
    big_n, sx, sxx, sxy, sy_t = n.sum(), (x * n).sum(), (x * x * n).sum(), (x * sy).sum(), sy.sum()
    slope = (big_n * sxy - sx * sy_t) / (big_n * sxx - sx * sx)
    fixed = (sy_t - slope * sx) / big_n
    total = syy.sum() - sy_t * sy_t / big_n
    resid = syy.sum() - 2 * fixed * sy_t - 2 * slope * sxy + big_n * fixed**2
    resid += 2 * fixed * slope * sx + slope**2 * sxx
    r2 = 1.0 - resid / total if total > 0 else 1.0
    if points["sumsq"].isna().any() or (points["sumsq"] == 0).any():
        r2 = math.nan
    steps = tuple(sorted(int(s) for s in points["steps"]))
    return stats.TrajectoryFit(float(fixed), float(slope), int(big_n), float(r2), steps)


def fits(rows: pd.DataFrame) -> pd.DataFrame:
    """`tables.fits` from summary rows."""
    columns = ["series", "fixed_s", "per_action_s", "n", "r2", "steps"]
    out = []
    for series, group in _points(rows).groupby("series", sort=True):
        fit = trajectory_fit(group)
        row = {"series": series, "fixed_s": math.nan, "per_action_s": math.nan, "n": 0}
        row.update(r2=math.nan, steps="")
        if fit is not None:
            row.update(fixed_s=fit.fixed_s, per_action_s=fit.per_action_s, n=fit.n, r2=fit.r2)
            row["steps"] = ",".join(map(str, fit.steps))
        out.append(row)
    return pd.DataFrame(out, columns=columns)


def estimates(
    rows: pd.DataFrame, steps: int, which: str = projection.TOTAL
) -> tuple[dict[str, projection.Estimate], dict[str, str]]:
    """`projection.estimates(runs, steps, which, by="series")` from summary rows."""
    per_series: dict[str, tuple[dict[int, float], dict[int, int]]] = {}
    for series in sorted(rows["series"].unique()) if not rows.empty else []:
        per_series[series] = ({}, {})
    for _, row in _points(rows).iterrows():
        if row["n"]:
            points, counts = per_series[row["series"]]
            points[int(row["steps"])] = _statistic(row, which)
            counts[int(row["steps"])] = int(row["n"])
    return projection.estimates_from(per_series, steps, which)


#: The columns of `vantages`: one row per series and vantage, beside the nearest vantage's.
VANTAGE_COLUMNS = (
    *("substrate", "mode", "fidelity", "workload", "vantage", "runs", "success_rate"),
    *("ttfc_n", "ttfc_p50_s", "ttfc_p95_s", "ttfc_vs_nearest", "episode_p50_s"),
)


def vantages(rows: pd.DataFrame) -> pd.DataFrame:
    """The same substrate seen from each vantage (docs/ray.md#vantages): per substrate, mode,
    fidelity, workload and vantage, runs, success rate, time to first command (n, p50, p95)
    and episode p50, and how many times the nearest vantage's time-to-first-command p50 each
    vantage's is (1.0: the nearest). Only series seen from two vantages or more."""
    by = list(DIMENSIONS)
    ttfc = summaries.latency(rows, "time_to_first_command_s", by) if not rows.empty else None
    if ttfc is None or ttfc.empty:
        return pd.DataFrame(columns=list(VANTAGE_COLUMNS))
    episode = summaries.latency(rows, "episode_s", by)[[*by, "p50"]]
    out = ttfc.merge(episode.rename(columns={"p50": "episode_p50_s"}), on=by, how="left")
    out = out.rename(columns={"n": "ttfc_n", "p50": "ttfc_p50_s", "p95": "ttfc_p95_s"})
    series = [d for d in DIMENSIONS if d != "vantage"]  # the same series, another vantage
    out = out[out.groupby(series)["vantage"].transform("nunique") > 1]
    if out.empty:
        return pd.DataFrame(columns=list(VANTAGE_COLUMNS))
    nearest = out.groupby(series)["ttfc_p50_s"].transform("min")
    out["ttfc_vs_nearest"] = out["ttfc_p50_s"] / nearest.where(nearest > 0)
    out["workload"] = [workload_name(t, s) for t, s in zip(out["tier"], out["steps"], strict=True)]
    out = out.sort_values([*series, "ttfc_p50_s"], na_position="last")
    return out[list(VANTAGE_COLUMNS)].reset_index(drop=True)


#: The launch paths in the order the Paths page shows them (docs/measurement.md#launch-paths).
PATH_ORDER = ("cold", "warm", "restore", "resume")


def paths(
    rows: pd.DataFrame,
    memory: pd.DataFrame | None = None,
    snapshots: pd.DataFrame | None = None,
) -> pd.DataFrame:
    """Per substrate and launch path, T0 time to first command and the T2 episode (each p50,
    p95 and n, from summary rows of the fixed scripts), paths in `PATH_ORDER`: the four ways to
    a ready environment side by side (the Paths page). With `memory` (`Runs.idle_memory`) and
    `snapshots` (the snapshots table), what each path holds while idle: the p50 and n of the
    memory a warm or paused environment held as it waited, and the bytes on disk of the
    restore path's ready snapshots."""
    columns = ["substrate", "launch_type"]
    out_columns = [
        *columns,
        "ttfc_n",
        "ttfc_p50_s",
        "ttfc_p95_s",
        "episode_n",
        "episode_p50_s",
        "episode_p95_s",
        "idle_memory_n",
        "idle_memory_p50_bytes",
        "snapshot_bytes",
    ]
    fixed = rows[rows["steps"] == 0] if not rows.empty else rows
    if fixed.empty:
        return pd.DataFrame(columns=out_columns)
    parts = []
    for tier, metric, name in (
        ("T0", "time_to_first_command_s", "ttfc"),
        ("T2", "episode_s", "episode"),
    ):
        table = summaries.latency(fixed[fixed["tier"] == tier], metric, columns)
        table = table[[*columns, "n", "p50", "p95"]].rename(
            columns={"n": f"{name}_n", "p50": f"{name}_p50_s", "p95": f"{name}_p95_s"}
        )
        parts.append(table.set_index(columns))
    out = parts[0].join(parts[1], how="outer")
    if memory is not None and not memory.empty:
        held = memory.groupby(columns)["memory_bytes"].agg(
            idle_memory_n="size",
            idle_memory_p50_bytes=lambda v: stats.percentile(v.astype(float).tolist(), 50),
        )
        out = out.join(held, how="left")
    out = out.reset_index()
    if snapshots is not None and not snapshots.empty:
        ready = snapshots[snapshots["state"] == "ready"]
        on_disk = ready.groupby("substrate")["size_bytes"].sum()
        out["snapshot_bytes"] = [
            on_disk.get(sub) if launch == "restore" else None
            for sub, launch in zip(out["substrate"], out["launch_type"], strict=True)
        ]
    order = {p: i for i, p in enumerate(PATH_ORDER)}
    out["_order"] = out["launch_type"].map(order).fillna(len(order))
    out = out.sort_values(["substrate", "_order"]).drop(columns=["_order"])
    return out.reindex(columns=out_columns).reset_index(drop=True)
