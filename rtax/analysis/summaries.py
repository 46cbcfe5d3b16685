"""Per-series summaries: what the dashboard's first paint reads instead of every raw sample.

Why (docs/data.md#summaries): a page over 100,000 runs and millions of actions must not scan them
on every render. So the store keeps, per series (substrate, kind, mode, fidelity, launch type,
vantage, tier, steps, workload toolchain) and UTC hour, one row per metric with the counts a
page needs: runs, the error classes of the failures (harness errors among them, counted apart),
and over the
successful runs' finite samples n, sum (means: totals use the mean), sum of squares (least-squares
fits), min, max, the coarsest resolution, and a mergeable quantile sketch (`rtax.analysis.sketch`,
the format of retention's rollups: exact up to `sketch.EXACT_LIMIT` samples, within `sketch.ALPHA`
beyond). The store writes a run's summary rows in the transaction that saves the run, so raw
samples and summaries never disagree; retention deletes raw rows but never summaries, so raw and
folded history stay one continuous summary.

Metrics: every phase and derived per-run metric (`RUN_METRICS`), each native milestone
(``milestone:<name>``, offsets of successful runs), and ``action_rows`` (every run's number of
action rows, so counts never scan the actions table).

This module is pure: rows from runs, and rows merged over any grouping (`combine`).
"""

from __future__ import annotations

import json
import math
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

import numpy as np
import pandas as pd

from rtax.analysis import sketch, stats
from rtax.core.failures import OWN_ERRORS
from rtax.core.record import METRIC_COLUMNS, METRIC_PHASES, PHASE_COLUMNS, PHASES, phases_of
from rtax.core.series import DIMENSIONS, Series

#: What a summary row is keyed by, besides its metric (the table's primary key with it).
#: Its series (`rtax.core.series`), then the kind and the workload toolchain (a series whose
#: toolchain changed is shown apart, docs/toolchain.md), then its bucket.
KEY = (*DIMENSIONS, "kind", "toolchain", "bucket", "bucket_start")
#: Every run is summarized three times: per hour (a window's edges), per day (its whole days)
#: and per calendar month (UTC), so that a week's window merges a few rows per series, not
#: hundreds, and a year of history a dozen, not 365 (issue 25: "all time" over a year read
#: 123,000 day rows, 2 KB of sketch each, and took 13 s to draw).
BUCKETS = ("hour", "day", "month")
#: The bucket of rows merged over a whole window (`regroup`): what the pages' cached reader
#: keeps, one row per series, workload and metric whatever the window's length.
WINDOW = "window"
RUN_METRICS = (*METRIC_COLUMNS, *PHASE_COLUMNS)
ACTION_ROWS = "action_rows"
MILESTONE = "milestone:"
#: The columns of the summaries table, in order.
COLUMNS = (
    *KEY,
    "metric",
    "runs",
    "n",
    "sum",
    "sumsq",
    "min",
    "max",
    "res_max",
    "last_started_at",
    "sketch",
    "errors",
)


def start_of(started_at: str, bucket: str = "hour") -> str:
    """The start of the UTC hour (day, month) `started_at` falls in, as an ISO string."""
    return _start(datetime.fromisoformat(started_at).astimezone(UTC), bucket)


def _start(stamp: datetime, bucket: str) -> str:
    """`start_of` of a time already parsed and in UTC (a run's three buckets, one parse)."""
    stamp = stamp.replace(minute=0, second=0, microsecond=0)
    if bucket in ("day", "month"):
        stamp = stamp.replace(hour=0)
    if bucket == "month":
        stamp = stamp.replace(day=1)
    return stamp.isoformat(timespec="microseconds")


def next_start(since: str, bucket: str = "hour") -> str:
    """The first hour (day, month) start at or after `since`: buckets from it lie wholly in
    a window that starts at `since`."""
    start = start_of(since, bucket)
    if start == datetime.fromisoformat(since).astimezone(UTC).isoformat(timespec="microseconds"):
        return start
    return following(start, bucket)


def following(start: str, bucket: str = "hour") -> str:
    """The start of the hour (day, month) after the one that starts at `start`."""
    first = datetime.fromisoformat(start)
    if bucket == "month":
        after = first.replace(year=first.year + first.month // 12, month=first.month % 12 + 1)
    else:
        after = first + (timedelta(days=1) if bucket == "day" else timedelta(hours=1))
    return after.isoformat(timespec="microseconds")


def _resolution(run: Mapping[str, Any], metric: str) -> float | None:
    """A run's resolution of `metric`: its phase's, or the sum over a derived metric's phases
    (`rtax.dashboard.tables.resolution_of`'s rule); None where nothing was polled."""
    phases = METRIC_PHASES.get(metric, (metric.removesuffix("_s"),))
    found = [run.get(f"{p}_res_s") for p in phases]
    found = [float(v) for v in found if v is not None and not _nan(v)]
    return sum(found) if found else None


def _nan(value: Any) -> bool:
    return isinstance(value, float) and math.isnan(value)


def _milestones(run: Mapping[str, Any]) -> dict[str, list[float]]:
    raw = run.get("milestones")
    items = json.loads(raw) if isinstance(raw, str) and raw else (raw or [])
    out: dict[str, list[float]] = {}
    for item in items:
        if isinstance(item, dict) and item.get("t_s") is not None:
            out.setdefault(f"{MILESTONE}{item['name']}", []).append(float(item["t_s"]))
    return out


def rows_of(
    runs: Iterable[Mapping[str, Any]],
    action_rows: Mapping[str, int] | None = None,
    buckets: Sequence[str] = BUCKETS,
) -> list[dict[str, Any]]:
    """Summary rows of `runs` (run rows as dicts, store columns), one per key and metric, per
    hour and per day (`buckets`). `action_rows`: run_id -> its number of action rows (0 where
    missing)."""
    acc: dict[tuple, dict[str, Any]] = {}
    for run in runs:
        samples = _samples(run, action_rows)
        series = (*Series.of(run).values(), run.get("kind"), run.get("toolchain") or "")
        started = datetime.fromisoformat(run["started_at"]).astimezone(UTC)
        for bucket in buckets:
            _add(acc, run, series, bucket, _start(started, bucket), samples)
    return [_row(key, a) for key, a in acc.items()]


def _samples(
    run: Mapping[str, Any], action_rows: Mapping[str, int] | None
) -> dict[str, tuple[list[float], float | None]]:
    """metric -> (the run's samples of it, its resolution): empty for a failed run, whose
    latencies never count, except its action-row count. A phase its launch type does not have
    (a warm run's create, a cold run's claim) is no metric of it at all."""
    out: dict[str, tuple[list[float], float | None]] = {}
    ok = run.get("status") == "ok"
    absent = {f"{p}_s" for p in PHASES} - {f"{p}_s" for p in phases_of(run.get("launch_type"))}
    for metric in RUN_METRICS:
        if metric in absent:
            continue
        v = run.get(metric) if ok else None
        out[metric] = (
            [] if v is None or _nan(v) else [float(v)],
            _resolution(run, metric) if ok else None,
        )
    if ok:
        out.update({k: (v, None) for k, v in _milestones(run).items()})
    out[ACTION_ROWS] = ([float((action_rows or {}).get(run.get("run_id"), 0))], None)
    return out


def _add(
    acc: dict[tuple, dict[str, Any]],
    run: Mapping[str, Any],
    series: tuple[Any, ...],
    bucket: str,
    start: str,
    samples: dict[str, tuple[list[float], float | None]],
) -> None:
    """Add one run's `samples` to the accumulators of its `bucket` starting at `start`
    (`series`: the key's part before the bucket, worked out once per run)."""
    key = (*series, bucket, start)
    error = None if run.get("status") == "ok" else (run.get("error_class") or "unknown")
    started = run["started_at"]
    for metric, (values, res) in samples.items():
        a = acc.get((*key, metric))
        if a is None:
            a = acc[(*key, metric)] = {
                "runs": 0,
                "errors": Counter(),
                "values": [],
                "res": None,
                "last": started,
            }
        a["runs"] += 1
        if error:
            a["errors"][error] += 1
        a["values"].extend(values)
        if started > a["last"]:
            a["last"] = started
        if res is not None:
            a["res"] = res if a["res"] is None else max(a["res"], res)


def _row(key: tuple, a: dict[str, Any]) -> dict[str, Any]:
    v = a["values"]
    return {
        **dict(zip((*KEY, "metric"), key, strict=True)),
        "runs": a["runs"],
        "n": len(v),
        "sum": float(sum(v)),
        "sumsq": float(sum(x * x for x in v)),
        "min": min(v) if v else None,
        "max": max(v) if v else None,
        "res_max": a["res"],
        "last_started_at": a["last"],
        "sketch": sketch.Sketch.of(v).to_json(),
        "errors": json.dumps(dict(a["errors"]), sort_keys=True),
    }


def merge_row(old: Mapping[str, Any], new: Mapping[str, Any]) -> dict[str, Any]:
    """One row holding the samples of two rows of the same key and metric."""

    def pick(f: Any, *vs: Any) -> Any:
        vs = [v for v in vs if v is not None and not _nan(v)]
        return f(vs) if vs else None

    errors = Counter(json.loads(old["errors"] or "{}")) + Counter(json.loads(new["errors"]))
    merged = sketch.Sketch.from_json(old["sketch"]).merge(sketch.Sketch.from_json(new["sketch"]))
    return {
        **new,
        "runs": int(old["runs"]) + int(new["runs"]),
        "n": int(old["n"]) + int(new["n"]),
        "sum": float(old["sum"] or 0) + float(new["sum"] or 0),
        "sumsq": float(old["sumsq"] or 0) + float(new["sumsq"] or 0),
        "min": pick(min, old["min"], new["min"]),
        "max": pick(max, old["max"], new["max"]),
        "res_max": pick(max, old["res_max"], new["res_max"]),
        "last_started_at": pick(max, old["last_started_at"], new["last_started_at"]),
        "sketch": merged.to_json(),
        "errors": json.dumps(dict(errors), sort_keys=True),
    }


def merge_sketches(texts: Sequence[str]) -> sketch.Sketch:
    """The merge of many sketches (JSON) at once: what merging them one by one gives (exact
    while their total is at most `EXACT_LIMIT`), in one parse and one vectorised bucketing, so
    a window of thousands of hourly rows merges in milliseconds."""
    parsed = json.loads("[" + ",".join(t or "{}" for t in texts) + "]")
    exact: list[float] = []
    counts: Counter[int] = Counter()
    zeros = 0
    bucketed = False
    for data in parsed:
        if "v" in data:
            exact.extend(data["v"])
            continue
        zeros += int(data.pop("z", 0))
        if data or zeros:
            bucketed = True
        counts.update({int(k): int(v) for k, v in data.items()})
    if not bucketed and len(exact) <= sketch.EXACT_LIMIT:
        return sketch.Sketch(values=exact)
    arr = np.asarray(exact, dtype=float)
    positive = arr[arr > 0]
    zeros += int(arr.size - positive.size)
    if positive.size:
        idx, n = np.unique(np.ceil(np.log(positive) / math.log(sketch.GAMMA)), return_counts=True)
        counts.update({int(i): int(c) for i, c in zip(idx, n, strict=True)})
    return sketch.Sketch(counts, zeros)


def label(rows: pd.DataFrame, floor: str | None) -> pd.DataFrame:
    """`rows` with the pages' `series` (a toolchain other than the floor's marked, as
    `stats.add_series` does), `workload` and `comparable` columns."""
    if rows.empty:
        return rows.assign(series=[], workload=[], comparable=[])
    frame = rows.copy()
    frame["toolchain"] = frame["toolchain"].mask(frame["toolchain"] == "")  # unknown
    return stats.add_series(frame, floor)


def combine(rows: pd.DataFrame, by: Sequence[str]) -> pd.DataFrame:
    """Rows merged over everything but `by` (which must include ``metric``): runs, attempts
    (runs but rtax's own failures), ok (successful runs), harness_errors, n, sum, sumsq, min,
    max, res_max, last_started_at, errors (a Counter) and the merged `sketch`."""
    columns = [*by, "runs", "attempts", "ok", "harness_errors", "n", "sum", "sumsq"]
    columns += ["min", "max", "res_max", "last_started_at", "errors", "sketch"]
    if rows.empty:
        return pd.DataFrame(columns=columns)
    frame = rows[[*by, "errors", "sketch", "last_started_at"]].copy()
    for column in ("runs", "n", "sum", "sumsq", "min", "max", "res_max"):
        frame[column] = pd.to_numeric(rows[column], errors="coerce").astype(float)
    # Vectorised sums and extremes; only error counts and sketches are merged in Python.
    grouped = frame.groupby(list(by), sort=True, dropna=False)
    out = grouped.agg(
        runs=("runs", "sum"),
        n=("n", "sum"),
        sum=("sum", "sum"),
        sumsq=("sumsq", "sum"),
        min=("min", "min"),
        max=("max", "max"),
        res_max=("res_max", "max"),
        last_started_at=("last_started_at", "max"),
        errors=("errors", list),
        sketch=("sketch", list),
    ).reset_index()
    counters = []
    for texts in out["errors"]:
        errors: Counter[str] = Counter()
        for text in texts:
            errors.update(json.loads(text or "{}"))
        counters.append(errors)
    out["runs"] = out["runs"].astype(int)
    out["n"] = out["n"].astype(int)
    out["errors"] = counters
    out["harness_errors"] = [sum(e.get(c, 0) for c in OWN_ERRORS) for e in counters]
    out["attempts"] = out["runs"] - out["harness_errors"]
    out["ok"] = out["runs"] - [sum(e.values()) for e in counters]
    out["sketch"] = [merge_sketches(texts) for texts in out["sketch"]]
    return out[columns]


def regroup(rows: pd.DataFrame, bucket: str) -> pd.DataFrame:
    """`rows` (summary rows of any buckets) merged into `bucket`: ``month`` (each row into the
    calendar month it starts in: how month rows are made from day rows), or `WINDOW` (all of a
    key's rows into one, starting at the earliest). Same columns as the table, the sketch and
    errors as JSON, so that whatever reads summary rows reads these alike; merging is
    `combine`'s, so a row merged here says what its parts said together."""
    if rows.empty:
        return pd.DataFrame(columns=list(COLUMNS))
    frame = rows.copy()
    keys = [k for k in KEY if k not in ("bucket", "bucket_start")]
    if bucket == WINDOW:
        frame["bucket_start"] = frame.groupby([*keys, "metric"], dropna=False)[
            "bucket_start"
        ].transform("min")
    else:
        frame["bucket_start"] = [start_of(str(s), bucket) for s in frame["bucket_start"]]
    frame["bucket"] = bucket
    merged = combine(frame, [*keys, "bucket", "bucket_start", "metric"])
    merged["sketch"] = [s.to_json() for s in merged["sketch"]]
    merged["errors"] = [json.dumps(dict(e), sort_keys=True) for e in merged["errors"]]
    return merged[list(COLUMNS)]


def latency(
    rows: pd.DataFrame,
    metric: str,
    by: Sequence[str],
    quantiles: Sequence[float] = (50, 95),
    *,
    intervals: bool = False,
) -> pd.DataFrame:
    """`stats.latency_table` from summary rows: per group runs (attempts), n, success rate,
    mean, percentiles (and with `intervals` their order-statistic intervals, read from the merged
    sketch), harness errors, and the coarsest resolution (`res_max`)."""
    qs = [f"p{q:g}" for q in quantiles]
    ends = stats.interval_columns(quantiles) if intervals else []
    columns = [*by, "runs", "n", "success_rate", "mean", *qs, *ends, "harness_errors", "res_max"]
    picked = rows[rows["metric"] == metric] if not rows.empty else rows
    merged = combine(picked, [*by, "metric"])
    if merged.empty:
        return pd.DataFrame(columns=columns)
    out = merged[list(by)].copy()
    out["runs"] = merged["attempts"]
    out["n"] = merged["n"]
    pairs = zip(merged["ok"], merged["attempts"], strict=True)
    out["success_rate"] = [o / a if a else math.nan for o, a in pairs]
    sums = zip(merged["sum"], merged["n"], strict=True)
    out["mean"] = [s / n if n else math.nan for s, n in sums]
    for q, name in zip(quantiles, qs, strict=True):
        out[name] = [stats.reported(q, s.n, s.quantile(q)) for s in merged["sketch"]]
        if intervals and q >= 95:
            found = [s.interval(q) if stats.shown(q, s.n) else None for s in merged["sketch"]]
            out[f"{name}_lo"] = [f[0] if f else math.nan for f in found]
            out[f"{name}_hi"] = [f[1] if f else math.nan for f in found]
    out["harness_errors"] = merged["harness_errors"]
    out["res_max"] = merged["res_max"].astype(float)
    return out[columns].reset_index(drop=True)
