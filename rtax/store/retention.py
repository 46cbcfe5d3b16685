"""Retention: fold raw samples older than the configured age into rollups that keep percentiles.

Why (docs/configuration.md#retention): a monitor that runs for months must stay bounded, but its
users ask "what was the p95 last quarter?". So raw runs and actions past the age are folded,
per (substrate, mode, fidelity, launch type, vantage, tier, steps, hour or day), into rows that
keep the number of runs, the successful samples' count, sum, min, max, a quantile sketch
(`rtax.analysis.sketch`) and the error classes of the failures, for every phase and derived
metric and for per-action latency; then the raw rows are deleted and the file compacted.

`window` answers a percentile query over any window, whether its samples are raw, rolled up or
both: raw samples are sketched the same way and merged, and read back with the raw path's
percentile rule (`rtax.analysis.stats.percentile`, linear interpolation). Tolerance: exact while
a group holds at most `sketch.EXACT_LIMIT` samples in the window, within `sketch.ALPHA` (1%)
relative of the raw percentile beyond (positive samples). The mean is exact (sum / n). Rolled-up
buckets count in a window when their start is inside it, so old windows are aligned to hours (or
days).
"""

from __future__ import annotations

import json
import time
from collections import Counter, defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import pandas as pd

from rtax.analysis.sketch import Sketch
from rtax.analysis.stats import attempts
from rtax.core.failures import OWN_ERRORS
from rtax.core.record import METRIC_COLUMNS, PHASE_COLUMNS
from rtax.core.series import DIMENSIONS, MISSING
from rtax.store.database import YIELD_S, Store

#: What is folded together: one series, never across modes, fidelities, launch types (cold,
#: warm) or vantages (docs/ray.md#vantages).
GROUP = DIMENSIONS
RUN_METRICS = (*METRIC_COLUMNS, *PHASE_COLUMNS)
ACTION_METRIC = "action_latency_s"
METRICS = (*RUN_METRICS, ACTION_METRIC)


@dataclass(frozen=True)
class FoldReport:
    runs: int
    rollup_rows: int
    bytes_before: int
    bytes_after: int


def bucket_start(started_at: str, bucket: str) -> str:
    """The start of the hour (or day) a run falls in, as an ISO UTC string."""
    stamp = datetime.fromisoformat(started_at).astimezone(UTC)
    stamp = stamp.replace(minute=0, second=0, microsecond=0)
    if bucket == "day":
        stamp = stamp.replace(hour=0)
    return stamp.isoformat(timespec="microseconds")


def fold(
    store: Store,
    *,
    older_than_days: float,
    bucket: str = "hour",
    now: datetime | None = None,
    batch: int = 500,
    compact: bool = True,
    pause_s: float = YIELD_S,
) -> FoldReport:
    """Fold every run that started before now - `older_than_days` into rollups, `batch` runs per
    transaction (a few tenths of a second of write lock at most), `pause_s` apart so that a
    waiting writer gets in; then compact (`Store.compact`, in bounded steps too)."""
    cutoff = ((now or datetime.now(UTC)) - timedelta(days=older_than_days)).isoformat(
        timespec="microseconds"
    )
    before = store.size_bytes()
    folded = rows = 0
    while True:
        runs = store.runs.read(until=cutoff, limit=batch)
        if runs.empty:
            break
        merged = _rollups(store, runs, bucket)
        store.fold_runs(merged, list(runs["run_id"]))
        folded += len(runs)
        rows += len(merged)
        time.sleep(pause_s)
    if compact and folded:
        store.compact(pause_s=pause_s)
    return FoldReport(folded, rows, before, store.size_bytes())


def _rollups(store: Store, runs: pd.DataFrame, bucket: str) -> list[dict[str, Any]]:
    """Rollup rows for `runs`, merged with what the store already holds for their buckets."""
    runs = _normalized(runs)
    runs["bucket_start"] = [bucket_start(s, bucket) for s in runs["started_at"]]
    per_run = _action_latencies(store, runs)
    existing = store.rollups.read(
        since=runs["bucket_start"].min(), until=_after(runs["bucket_start"].max())
    )
    keyed = {
        (*[row[k] for k in GROUP], row["bucket"], row["bucket_start"], row["metric"]): row
        for row in existing.to_dict("records")
    }
    out: list[dict[str, Any]] = []
    for key, group in runs.groupby([*GROUP, "bucket_start"], sort=False, dropna=False):
        ok = group[group["status"] == "ok"]
        errors = Counter(group.loc[group["status"] != "ok", "error_class"].fillna("unknown"))
        for metric in METRICS:
            values = _values(ok, metric, per_run)
            row = _row(key, group["kind"].iloc[0], bucket, metric, len(group), values, errors)
            old = keyed.get((*key[:-1], bucket, key[-1], metric))
            out.append(_merge(old, row) if old else row)
    return out


def _normalized(runs: pd.DataFrame) -> pd.DataFrame:
    """`runs` with the defaults of rows older than their columns: exec mode, cold starts, the
    local vantage."""
    runs = runs.copy()
    for column in ("mode", "launch_type", "vantage"):
        default = MISSING[column]
        given = runs[column] if column in runs else pd.Series(None, index=runs.index)
        runs[column] = given.fillna(default)
    return runs


def _action_latencies(store: Store, runs: pd.DataFrame) -> dict[str, list[float]]:
    """run_id -> its action latencies, for the successful runs of `runs`."""
    actions = store.runs.action_latencies(list(runs.loc[runs["status"] == "ok", "run_id"]))
    return actions.groupby("run_id")["latency_s"].apply(list).to_dict()


def _values(ok: pd.DataFrame, metric: str, per_run: dict[str, list[float]]) -> list[float]:
    """The samples of `metric` in successful runs `ok` (per action for the action metric)."""
    if metric == ACTION_METRIC:
        return [v for r in ok["run_id"] for v in per_run.get(r, [])]
    return [float(v) for v in ok[metric] if pd.notna(v)]


def _after(start: str) -> str:
    return (datetime.fromisoformat(start) + timedelta(microseconds=1)).isoformat(
        timespec="microseconds"
    )


def _row(
    key: tuple,
    kind: str,
    bucket: str,
    metric: str,
    runs: int,
    values: Sequence[float],
    errors: Counter[str],
) -> dict[str, Any]:
    *group, start = key
    return {
        **dict(zip(GROUP, group, strict=True)),
        "kind": kind,
        "bucket": bucket,
        "bucket_start": start,
        "metric": metric,
        "runs": runs,
        "n": len(values),
        "sum": float(sum(values)),
        "min": min(values) if values else None,
        "max": max(values) if values else None,
        "sketch": Sketch.of(values).to_json(),
        "errors": json.dumps(dict(errors), sort_keys=True),
    }


def _merge(old: dict[str, Any], new: dict[str, Any]) -> dict[str, Any]:
    sketch = Sketch.from_json(old["sketch"]).merge(Sketch.from_json(new["sketch"]))
    errors = Counter(json.loads(old["errors"] or "{}")) + Counter(json.loads(new["errors"]))
    mins = [v for v in (old["min"], new["min"]) if v is not None and pd.notna(v)]
    maxs = [v for v in (old["max"], new["max"]) if v is not None and pd.notna(v)]
    return {
        **new,
        "runs": int(old["runs"]) + new["runs"],
        "n": int(old["n"]) + new["n"],
        "sum": float(old["sum"] or 0) + new["sum"],
        "min": min(mins) if mins else None,
        "max": max(maxs) if maxs else None,
        "sketch": sketch.to_json(),
        "errors": json.dumps(dict(errors), sort_keys=True),
    }


def window(
    store: Store,
    metric: str,
    *,
    since: str | None = None,
    until: str | None = None,
    quantiles: Sequence[float] = (50, 95),
    raw: pd.DataFrame | None = None,
) -> pd.DataFrame:
    """Per group: runs, n, success rate, mean and percentiles of `metric` over a window that may
    span raw samples and rollups (see the module docstring for the tolerance: exact up to
    `sketch.EXACT_LIMIT` samples, within 1% beyond).

    `raw`: the window's raw runs when the caller already has them (the dashboard's cached
    read), so they are not read twice."""
    if metric not in METRICS:
        raise ValueError(f"unknown metric {metric!r}")
    acc: dict[tuple, dict[str, Any]] = defaultdict(
        lambda: {"runs": 0, "n": 0, "sum": 0.0, "sketch": Sketch()}
    )
    runs = store.runs.read(since=since, until=until) if raw is None else raw.copy()
    if not runs.empty:
        runs = _normalized(runs)
        per_run = _action_latencies(store, runs) if metric == ACTION_METRIC else {}
        for key, group in runs.groupby(list(GROUP), dropna=False):
            values = _values(group[group["status"] == "ok"], metric, per_run)
            a = acc[key]
            a["runs"] += len(attempts(group))  # rtax's own failures are not the substrate's
            a["n"] += len(values)
            a["sum"] += sum(values)
            a["sketch"].add_all(values)
    for row in store.rollups.read(since=since, until=until, metric=metric).to_dict("records"):
        a = acc[tuple(row[k] for k in GROUP)]
        errors = json.loads(row.get("errors") or "{}")
        harness = sum(errors.get(c, 0) for c in OWN_ERRORS)
        a["runs"] += int(row["runs"]) - int(harness)
        a["n"] += int(row["n"])
        a["sum"] += float(row["sum"] or 0)
        a["sketch"].merge(Sketch.from_json(row["sketch"]))
    out = []
    for key, a in sorted(acc.items(), key=lambda kv: tuple(str(k) for k in kv[0])):
        row = dict(zip(GROUP, key, strict=True))
        row.update(
            runs=a["runs"],
            n=a["n"],
            success_rate=(a["n"] / a["runs"]) if metric != ACTION_METRIC and a["runs"] else None,
            mean=a["sum"] / a["n"] if a["n"] else None,
        )
        for q in quantiles:
            row[f"p{q:g}"] = a["sketch"].quantile(q)
        out.append(row)
    return pd.DataFrame(
        out, columns=[*GROUP, "runs", "n", "success_rate", "mean", *(f"p{q:g}" for q in quantiles)]
    )
