"""The Timeline page's points: p50, p95 and success rate per series and time bucket, with the
incidents to draw over them.

Why two sources (docs/dashboard.md#timeline): hourly and daily points come from the store's
summaries (`rtax.analysis.summaries`), which hold raw and folded history alike, so a month-old day
reads the same as today's. Five-minute points need the raw samples, which retention keeps only for
``raw_days``: before the oldest raw run, the five-minute view goes on with the hourly summaries,
and says so per point (``source``). The hour at the retention edge shows its raw samples only.

Percentiles follow the one definition (linear interpolation; `rtax.analysis.sketch` on summaries,
exact up to `sketch.EXACT_LIMIT` samples a point); latency counts successful rollouts only, and
success counts every rollout but rtax's own failures (``harness_error``, ``engine_error``;
docs/measurement.md#failures). A series is that of the incidents and the status board
(`rtax.store.incidents.SERIES_COLUMNS`). This module is pure.
"""

from __future__ import annotations

import json
import math
from collections import Counter
from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np
import pandas as pd

from rtax.analysis import sketch, summaries
from rtax.core.failures import OWN_ERRORS
from rtax.core.record import PHASE_COLUMNS
from rtax.core.series import DIMENSIONS, MISSING, Series

#: Bucket label -> seconds.
BUCKETS: dict[str, int] = {"5 min": 300, "1 h": 3_600, "1 d": 86_400}
#: Where each bucket's points come from: the raw runs, or the summaries of that granularity.
SUMMARY_BUCKET = {"1 h": "hour", "1 d": "day"}
#: Five-minute points read raw runs: offered for spans up to this long.
RAW_SPAN_S = 7 * 86_400
#: The metrics a timeline can show, label -> runs column.
METRICS: dict[str, str] = {
    "time to first command": "time_to_first_command_s",
    "episode": "episode_s",
    "wall": "wall_s",
    **{f"phase: {c.removesuffix('_s')}": c for c in PHASE_COLUMNS},
}
#: A point's columns.
COLUMNS = [
    "key",
    "series",
    "bucket_start",
    "bucket_end",
    "runs",
    "ok",
    "failures",
    "errors",
    "harness_errors",
    "n",
    "p50",
    "p95",
    "success_rate",
    "source",
]
_SERIES = list(DIMENSIONS)


def default_bucket(span_s: float) -> str:
    """The finest bucket that keeps a span to a readable number of points (about 600 at most):
    5 min up to two days, 1 h up to 25 days, else 1 d."""
    if span_s <= 2 * 86_400:
        return "5 min"
    if span_s <= 25 * 86_400:
        return "1 h"
    return "1 d"


def _label(frame: pd.DataFrame) -> pd.DataFrame:
    """`frame` with each row's series ``key`` (`rtax.core.series.Series.key`) and ``series``
    label (`Series.label`), computed once per distinct series."""
    frame = frame.copy()
    frame["steps"] = frame["steps"].astype(int)
    for column, default in MISSING.items():
        frame[column] = frame[column].fillna(default)
    distinct = frame[_SERIES].drop_duplicates()
    found = [Series.of(r) for r in distinct.to_dict("records")]
    distinct = distinct.assign(key=[s.key for s in found], series=[s.label for s in found])
    return frame.merge(distinct, on=_SERIES, how="left")


def keep(frame: pd.DataFrame, keys: Iterable[str] | None) -> pd.DataFrame:
    """The rows of `frame` (runs or summary rows) of the series `keys` (None: all)."""
    if keys is None or frame.empty:
        return frame
    labelled = _label(frame)
    return frame[labelled["key"].isin(set(keys)).to_numpy()]


def from_runs(runs: pd.DataFrame, column: str, bucket_s: int) -> pd.DataFrame:
    """Points of raw runs (`status.SERIES` columns, ``started_at``, ``status``,
    ``error_class`` and `column`) in buckets of `bucket_s` seconds from the epoch (UTC)."""
    if runs.empty:
        return pd.DataFrame(columns=COLUMNS)
    frame = _label(runs)
    started = pd.to_datetime(frame["started_at"], utc=True, format="ISO8601")
    frame["bucket_start"] = started.dt.floor(f"{bucket_s}s")
    frame["value"] = pd.to_numeric(frame[column], errors="coerce")
    out = []
    for (key, label, start), group in frame.groupby(["key", "series", "bucket_start"], sort=True):
        harness = group["error_class"].isin(OWN_ERRORS)
        counted = group[~harness]
        ok = counted["status"].eq("ok")
        errors = Counter(counted.loc[~ok, "error_class"].fillna("unknown"))
        values = counted.loc[ok, "value"].to_numpy(dtype=float)
        values = values[np.isfinite(values)]
        out.append(
            _point(
                key, label, start, bucket_s, len(counted), int(ok.sum()), errors, int(harness.sum())
            )
            | _quantiles(values, len(values))
            | {"source": "raw"}
        )
    return pd.DataFrame(out, columns=COLUMNS)


def from_summaries(rows: pd.DataFrame, column: str, bucket: str) -> pd.DataFrame:
    """Points of summary rows of one granularity (``hour`` or ``day``) and one metric
    (`column`), merged per series and bucket (a series' toolchains and kinds together)."""
    picked = rows[rows["metric"] == column] if not rows.empty else rows
    if picked.empty:
        return pd.DataFrame(columns=COLUMNS)
    labelled = _label(picked)
    by = ["key", "series", "bucket_start", "metric"]
    if labelled.duplicated(by).any():  # a series summarized under two toolchains or kinds
        merged = summaries.combine(labelled, by)
        errors = list(merged["errors"])
        sketches = list(merged["sketch"])
        attempts, ok, harness = merged["attempts"], merged["ok"], merged["harness_errors"]
    else:  # one row a point (the usual case): nothing to merge
        merged = labelled
        errors = [Counter(json.loads(e or "{}")) for e in merged["errors"]]
        sketches = [sketch.Sketch.from_json(t) for t in merged["sketch"]]
        harness = pd.Series([sum(e.get(c, 0) for c in OWN_ERRORS) for e in errors])
        attempts = merged["runs"].astype(int).reset_index(drop=True) - harness
        ok = merged["runs"].astype(int).reset_index(drop=True) - [sum(e.values()) for e in errors]
    bucket_s = BUCKETS["1 h" if bucket == "hour" else "1 d"]
    starts = pd.to_datetime(merged["bucket_start"], utc=True, format="ISO8601")
    out = []
    for key, label, start, sk, err, n, a, o, h in zip(
        merged["key"].tolist(),
        merged["series"].tolist(),
        starts.tolist(),
        sketches,
        errors,
        merged["n"].astype(int).tolist(),
        list(attempts),
        list(ok),
        list(harness),
        strict=True,
    ):
        counted = Counter({k: v for k, v in err.items() if k not in OWN_ERRORS})
        point = _point(key, label, start, bucket_s, int(a), int(o), counted, int(h))
        point["n"] = n
        point["p50"] = sk.quantile(50) if n else math.nan
        point["p95"] = sk.quantile(95) if n else math.nan
        point["source"] = f"summary ({bucket})"
        out.append(point)
    return pd.DataFrame(out, columns=COLUMNS)


def continuous(raw: pd.DataFrame, hourly: pd.DataFrame, oldest_raw: str | None) -> pd.DataFrame:
    """Five-minute points from raw runs, preceded by the hourly summary points of the hours
    before the oldest raw run's hour (folded history): one history, no hour counted twice."""
    if oldest_raw is None:  # every raw run folded: the summaries are the whole history
        return hourly.reset_index(drop=True)
    if hourly.empty:
        return raw.reset_index(drop=True)
    edge = pd.Timestamp(oldest_raw).tz_convert("UTC").floor("1h")
    before = hourly[hourly["bucket_start"] < edge]
    parts = [p for p in (before, raw) if not p.empty]
    if not parts:
        return pd.DataFrame(columns=COLUMNS)
    out = pd.concat(parts, ignore_index=True) if len(parts) > 1 else parts[0]
    return out.sort_values(["series", "bucket_start"]).reset_index(drop=True)


def spans(
    incidents: pd.DataFrame, keys: Mapping[str, str], now: pd.Timestamp
) -> list[dict[str, Any]]:
    """The incidents of the series shown (`keys`: series key -> its label) as spans to draw:
    from the change (``start``) to its end, or to `now` while open."""
    out = []
    if incidents is None or incidents.empty:
        return out
    for row in incidents.to_dict("records"):
        if row["series"] not in keys:
            continue
        start = pd.Timestamp(row["start"]).tz_convert("UTC")
        ended = row.get("end")
        end = pd.Timestamp(ended).tz_convert("UTC") if isinstance(ended, str) and ended else now
        text = f"incident #{int(row['id'])} · {row['state']}"
        out.append(
            {
                "id": int(row["id"]),
                "series": keys[row["series"]],
                "metric": row["metric"],
                "state": row["state"],
                "start": start,
                "end": max(end, start),
                "text": text,
                "detail": row.get("detail") or "",
            }
        )
    return out


def _point(
    key: str,
    label: str,
    start: pd.Timestamp,
    bucket_s: int,
    attempts: int,
    ok: int,
    errors: Counter,
    harness: int,
) -> dict[str, Any]:
    return {
        "key": key,
        "series": label,
        "bucket_start": start,
        "bucket_end": start + pd.Timedelta(seconds=bucket_s),
        "runs": attempts,
        "ok": ok,
        "failures": attempts - ok,
        "errors": json.dumps(dict(sorted(errors.items()))) if errors else "",
        "harness_errors": harness,
        "success_rate": ok / attempts if attempts else math.nan,
    }


def _quantiles(values: np.ndarray, n: int) -> dict[str, Any]:
    if not n:
        return {"n": 0, "p50": math.nan, "p95": math.nan}
    p50, p95 = np.percentile(values, [50, 95])
    return {"n": n, "p50": float(p50), "p95": float(p95)}


#: The incidents table below the chart: a view of incident rows (the store's
#: ``INCIDENT_COLUMNS``), with before and after split by unit, so a column holds one unit.
INCIDENT_TABLE_COLUMNS = (
    "id", "series", "metric", "state", "start", "end",
    "before_p50_s", "after_p50_s", "before_rate", "after_rate", "magnitude", "detail",
)  # fmt: skip


def incident_table(spans_shown: list[dict[str, Any]], incidents: pd.DataFrame) -> pd.DataFrame:
    """The incidents drawn (`spans`), newest first, with their before/after p50 from the
    incident rows: in seconds for a latency metric, as a share for the success rate (two
    columns each, so a column holds one unit); `end` blank while open."""
    if not spans_shown:
        return pd.DataFrame(columns=list(INCIDENT_TABLE_COLUMNS))
    details = incidents.set_index("id")
    rows = []
    for span in spans_shown:
        found = details.loc[span["id"]] if span["id"] in details.index else {}
        is_rate = span["metric"] == "success_rate"
        before, after = found.get("before_p50"), found.get("after_p50")
        rows.append(
            {
                **{k: span[k] for k in ("id", "series", "metric", "state", "start")},
                "end": span["end"] if span["state"] == "resolved" else pd.NaT,
                "before_p50_s": None if is_rate else before,
                "after_p50_s": None if is_rate else after,
                "before_rate": before if is_rate else None,
                "after_rate": after if is_rate else None,
                "magnitude": found.get("magnitude"),
                "detail": found.get("detail"),
            }
        )
    frame = pd.DataFrame(rows, columns=list(INCIDENT_TABLE_COLUMNS))
    return frame.sort_values("id", ascending=False).reset_index(drop=True)
