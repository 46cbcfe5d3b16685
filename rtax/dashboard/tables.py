"""The tables the pages show: pure functions of run frames, built on `rtax.analysis.stats`.

Why separate from the pages: the numbers a user reads must be exactly what `rtax.analysis.stats`
computes, and tests check that by calling these functions on the same data (docs/dashboard.md).
Every latency table carries `n` and the success rate.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from datetime import UTC, datetime

import pandas as pd

from rtax.analysis import stats
from rtax.core.record import METRIC_PHASES, PHASE_COLUMNS, phases_of
from rtax.planning import projection, published

GROUP = ("series", "tier", "steps")
#: The Overview's columns, whether computed from raw runs (`overview`) or from the summaries
#: (`rtax.dashboard.summarized`).
OVERVIEW_COLUMNS = (
    *GROUP,
    "fidelity",
    "runs",
    "success_rate",
    "harness_errors",
    "ttfc_p50_s",
    "ttfc_p95_s",
    "ttfc_p99_s",
    "ttfc_p99_lo_s",
    "ttfc_p99_hi_s",
    "ttfc_n",
    "ttfc_res_s",
    "episode_p50_s",
    "episode_p95_s",
    "episode_p99_s",
    "episode_n",
    "episode_res_s",
    "last_probe_age_s",
)
#: The percentiles a table of latencies shows: p99 only where n allows it (`stats.shown`,
#: "n too small" on the page otherwise), with its 95 % interval (`stats.quantile_interval`)
#: where the sample bounds it.
TAILS = (50, 95, 99)
#: The parts of wall time, as `stats.phase_summary` names them.
PHASES = tuple(c.removesuffix("_s") for c in PHASE_COLUMNS)
#: A resolution is shown beside a percentile once it exceeds this share of it
#: (docs/measurement.md#resolution); below, polling's error is lost in the number's own spread.
RESOLUTION_SHARE = 0.05


def resolution_of(runs: pd.DataFrame, metric: str) -> pd.Series:
    """Per run, the resolution of `metric` (s): its phase's ``<phase>_res_s``, or for a sum
    of phases the sum of theirs. NaN where nothing was polled (or, before schema v5, nothing
    was recorded)."""
    phases = METRIC_PHASES.get(metric, (metric.removesuffix("_s"),))
    columns = [f"{p}_res_s" for p in phases if f"{p}_res_s" in runs.columns]
    if not columns:
        return pd.Series(math.nan, index=runs.index, dtype=float)
    return runs[columns].astype(float).sum(axis=1, min_count=1)


def disclosed(resolution: float, value: float) -> float:
    """`resolution` where it exceeds `RESOLUTION_SHARE` of the percentile `value`, else NaN
    (an empty cell: nothing to disclose)."""
    if pd.isna(resolution) or pd.isna(value) or resolution <= RESOLUTION_SHARE * abs(value):
        return math.nan
    return float(resolution)


def _resolution(group: pd.DataFrame, metric: str) -> float:
    """The coarsest resolution among a group's successful samples of `metric`: no sample
    behind its percentiles was detected more coarsely."""
    ok = stats.successful(group)
    return float(resolution_of(ok, metric).max()) if not ok.empty else math.nan


def _with_resolution(
    table: pd.DataFrame, runs: pd.DataFrame, metric: str, by: Iterable[str], against: str
) -> list[float]:
    """Per row of `table` (grouped by `by`): the disclosed resolution beside `against`."""
    by = list(by)
    found = {
        (key if isinstance(key, tuple) else (key,)): _resolution(group, metric)
        for key, group in runs.groupby(by, sort=True, dropna=False)
    }
    return [
        disclosed(found.get(tuple(getattr(r, c) for c in by), math.nan), getattr(r, against))
        for r in table.itertuples(index=False)
    ]


def _age(started_at: pd.Series, now: datetime) -> pd.Series:
    stamps = pd.to_datetime(started_at, utc=True, format="ISO8601")
    return (pd.Timestamp(now) - stamps).dt.total_seconds()


def _tails(out: pd.DataFrame, name: str, table: pd.DataFrame, intervals: bool = False) -> None:
    """`table`'s n and percentiles (`TAILS`) into `out` as ``<name>_n``, ``<name>_p50_s``, ...,
    with p99's interval (``<name>_p99_lo_s``, ``<name>_p99_hi_s``) when asked: the Overview's
    layout, whichever twin computed `table`."""
    for q in TAILS:
        out[f"{name}_p{q}_s"] = table[f"p{q}"].to_numpy()
    if intervals:
        out[f"{name}_p99_lo_s"] = table["p99_lo"].to_numpy()
        out[f"{name}_p99_hi_s"] = table["p99_hi"].to_numpy()
    out[f"{name}_n"] = table["n"].to_numpy()


def overview(runs: pd.DataFrame, now: datetime | None = None) -> pd.DataFrame:
    """Per series x tier x steps: time-to-first-command and episode p50/p95 with n, success
    rate, harness errors apart (rtax's own failures, not in `runs`), seconds since the last
    probe, fidelity."""
    columns = list(OVERVIEW_COLUMNS)
    if runs.empty:
        return pd.DataFrame(columns=columns)
    now = now or datetime.now(UTC)
    ttfc = stats.latency_table(
        runs, "time_to_first_command_s", by=GROUP, quantiles=TAILS, intervals=True
    )
    episode = stats.latency_table(runs, "episode_s", by=GROUP, quantiles=TAILS)
    out = ttfc[[*GROUP, "runs", "success_rate", "harness_errors"]].copy()
    _tails(out, "ttfc", ttfc, intervals=True)
    _tails(out, "episode", episode)
    out["ttfc_res_s"] = _with_resolution(ttfc, runs, "time_to_first_command_s", GROUP, "p50")
    out["episode_res_s"] = _with_resolution(episode, runs, "episode_s", GROUP, "p50")
    grouped = runs.groupby(list(GROUP), sort=True)
    last = grouped["started_at"].max().reset_index()
    fidelity = grouped["fidelity"].first().reset_index()
    out = out.merge(last, on=list(GROUP)).merge(fidelity, on=list(GROUP))
    out["last_probe_age_s"] = _age(out["started_at"], now)
    return out[columns]


def cold_start(runs: pd.DataFrame) -> pd.DataFrame:
    """Per series: n, success rate and p50/p95/p99 of the episode time (the tier's cold start),
    with the tails' 95 % intervals. Give it the runs of one tier (and the fixed scripts:
    steps 0)."""
    table = stats.latency_table(
        runs, "episode_s", by=("series", "fidelity"), quantiles=TAILS, intervals=True
    )
    table["res_s"] = _with_resolution(table, runs, "episode_s", ("series", "fidelity"), "p50")
    return table.sort_values("p50", na_position="last").reset_index(drop=True)


def spread(table: pd.DataFrame, fidelity: str = "real") -> tuple[float, str | None, str | None]:
    """(slowest p50 / fastest p50, fastest series, slowest series) over the series of one
    fidelity that have samples: a spread across real and emulated data would mean nothing."""
    usable = table[(table["n"] > 0) & table["p50"].notna() & (table["fidelity"] == fidelity)]
    if len(usable) < 2:
        return math.nan, None, None
    fastest = usable.loc[usable["p50"].idxmin()]
    slowest = usable.loc[usable["p50"].idxmax()]
    return projection.spread(usable["p50"]), fastest["series"], slowest["series"]


def phase_percentiles(runs: pd.DataFrame) -> pd.DataFrame:
    """Per series x workload x phase, over successful runs: n, p50, p95, p99 (where `n` allows
    it), mean (seconds). By workload (tier and trajectory length), like the bars: a T2 fix and
    a 150-step trajectory are different things."""
    columns = [
        *("series", "workload", "phase", "n", "p50", "p95", "p99"),
        *("res_s", "mean", "success_rate"),
    ]
    if runs.empty:
        return pd.DataFrame(columns=columns)
    rows = []
    for (series, workload), group in runs.groupby(["series", "workload"], sort=True):
        table = stats.phase_summary(group, TAILS)
        # the phases of the series' launch type (a warm series has no create, a cold no claim)
        launch = group["launch_type"].iloc[0] if "launch_type" in group else None
        had = [*phases_of(launch), "overhead"]
        table = table[table["phase"].isin(PHASES) & table["phase"].isin(had)]
        for row in table.itertuples(index=False):
            rows.append(
                {
                    "series": series,
                    "workload": workload,
                    "phase": row.phase,
                    "n": row.n,
                    "p50": row.p50,
                    "p95": row.p95,
                    "p99": row.p99,
                    "res_s": disclosed(_resolution(group, f"{row.phase}_s"), row.p50),
                    "mean": row.mean,
                    "success_rate": row.success_rate,
                }
            )
    return pd.DataFrame(rows, columns=columns)


def trajectory_points(runs: pd.DataFrame, which: str = projection.TOTAL) -> pd.DataFrame:
    """Per series and trajectory length S (> 0): n, success rate, the statistic of the
    trajectory time (the mean unless asked: it is what the fitted lines and totals follow), and
    the amortized per-action latency (that time / S)."""
    columns = ["series", "steps", "runs", "n", "success_rate", "seconds", "res_s", "per_action_s"]
    traj = runs[runs["steps"] > 0] if not runs.empty else runs
    if traj.empty:
        return pd.DataFrame(columns=columns)
    rows = []
    for (series, steps), group in traj.groupby(["series", "steps"], sort=True):
        ok = stats.successful(group)
        value = projection.statistic(ok["episode_s"], which)
        rows.append(
            {
                "series": series,
                "steps": int(steps),
                "runs": len(stats.attempts(group)),
                "n": len(ok),
                "success_rate": stats.success_rate(group),
                "seconds": value,
                "res_s": disclosed(_resolution(group, "episode_s"), value),
                "per_action_s": value / steps,
            }
        )
    return pd.DataFrame(rows, columns=columns)


def fits(runs: pd.DataFrame) -> pd.DataFrame:
    """Per series: the least-squares line T(S) = fixed + S x per_action over successful
    trajectory runs, with n, r² and the lengths used; series without two lengths are listed
    with empty coefficients."""
    columns = ["series", "fixed_s", "per_action_s", "n", "r2", "steps"]
    if runs.empty:
        return pd.DataFrame(columns=columns)
    rows = []
    for series, fit in stats.trajectory_fits(runs, by="series").items():
        if fit is None:
            rows.append(
                {
                    "series": series,
                    "fixed_s": math.nan,
                    "per_action_s": math.nan,
                    "n": 0,
                    "r2": math.nan,
                    "steps": "",
                }
            )
        else:
            rows.append(
                {
                    "series": series,
                    "fixed_s": fit.fixed_s,
                    "per_action_s": fit.per_action_s,
                    "n": fit.n,
                    "r2": fit.r2,
                    "steps": ",".join(str(s) for s in fit.steps),
                }
            )
    return pd.DataFrame(rows, columns=columns)


def crossovers(fit_table: pd.DataFrame) -> pd.DataFrame:
    """Where one fitted series overtakes another (S > 0)."""
    usable = fit_table.dropna(subset=["fixed_s", "per_action_s"])
    lines = {r.series: (r.fixed_s, r.per_action_s) for r in usable.itertuples(index=False)}
    found = projection.crossovers(lines)
    return pd.DataFrame(
        [
            {
                "faster_below": c.cheaper_short,
                "faster_above": c.cheaper_long,
                "crossover_steps": c.steps,
                "seconds_at_crossover": c.seconds,
            }
            for c in found
        ],
        columns=["faster_below", "faster_above", "crossover_steps", "seconds_at_crossover"],
    )


EMPTY_HINT = (
    "No probes in this window yet: run `rtax probe --substrate local --tier T0 --repeat 5` "
    "(or `make run`) and this page fills in."
)
PREVIEW_ROWS = 1_000

_FIDELITY_NOTES = {
    "emulated": "**emulated** series ran through the real client library against a local "
    "emulation of the service: their numbers are this machine's Docker engine behind an "
    "emulated API, never the cloud service itself",
    "modelled": "**modelled** series carry latencies injected from published figures",
}


def fidelity_note(fidelities: Iterable[str]) -> str | None:
    """What the non-real fidelities present mean, for a caption beside the tables (None when
    every series is real)."""
    notes = [_FIDELITY_NOTES[f] for f in ("emulated", "modelled") if f in set(fidelities)]
    if not notes:
        return None
    return (
        "Not real measurements of the service: "
        + "; ".join(notes)
        + " (docs/measurement.md#fidelity)."
    )


def cold_start_all(runs: pd.DataFrame) -> pd.DataFrame:
    """`cold_start` for every tier's fixed script, stacked, with the tier as a column."""
    fixed = runs[runs["steps"] == 0] if not runs.empty else runs
    parts = []
    for tier in sorted(fixed["tier"].unique()):
        table = cold_start(fixed[fixed["tier"] == tier])
        table.insert(0, "tier", tier)
        parts.append(table)
    if not parts:
        return pd.DataFrame(
            columns=[
                *("tier", "series", "runs", "n", "success_rate"),
                *("mean", "p50", "p95", "p99", *stats.interval_columns(TAILS), "res_s"),
            ]
        )
    return pd.concat(parts, ignore_index=True)


def scenarios() -> pd.DataFrame:
    """The study's published worker-hour figures beside the model's answer from their inputs."""
    return pd.DataFrame(
        [
            {
                "scenario": s.name,
                "trajectories": s.rollouts,
                "actions": s.steps,
                "per_rollout_s": s.per_rollout_s,
                "per_action_s": s.per_action_s,
                "model_hours": projection.scenario_hours(s),
                "published_hours": s.published_hours,
                "source": s.source,
            }
            for s in published.SCENARIOS
        ]
    )


DATA_DICTIONARY = """
| column | meaning |
|---|---|
| `run_id` | one rollout; links its actions |
| `started_at`, `ended_at` | UTC, ISO 8601 |
| `substrate`, `kind`, `mode` | configured name, implementation, action mode (exec / session) |
| `tier`, `steps` | T0/T1/T2; `steps` 0 = the tier's fixed script, S > 0 = an S-action trajectory |
| `fidelity` | real (measured here) / emulated (real client, emulated control plane) / modelled |
| `status`, `error_class` | ok or failed, and why (failed runs never enter latency statistics) |
| `harness_errors` | rtax's own failures (`harness_error`): kept and shown, not in `runs` |
| `create_s` … `cleanup_s` | consecutive phases (s); with `overhead_s` they add up to `wall_s` |
| `overhead_s` | wall time minus the sum of phases: the harness's own cost |
| `launch_type`, `claim_s` | cold (made) or warm: claimed from a warm pool (`claim_s`, no create) |
| `time_to_first_command_s` | create + orchestration + ready; warm: claim |
| `episode_s` | create (or claim) request → end of the last action (the per-tier cold start) |
| `series` | substrate · mode · warm [fidelity]: what may be aggregated together |
| `workload` | tier, or tier and trajectory length (`T2 S=50`) |
| `n` | successful samples behind a statistic; `success_rate` = n / runs (attempts) |
| `p50`, `p95`, `p99`, `mean` | seconds, from raw samples (linear interpolation) |
| `res_s`, `*_res_s` (tables) | resolution: coarsest poll gap among the samples, if > 5 % of p50 |
| `create_res_s` … `cleanup_res_s` | a phase's poll gap at detection (empty: not polled) |
| `resolution_s` (actions) | a command's poll gap at detection (empty: not polled) |
| `latency_s` (actions) | one command, timed by the runner; `exec_s` timed by the substrate |
| `phase` (actions) | ready (no-op attempts), setup (T2 clone), action |
"""
