"""The Timeline page's points: p50, p95 and success rate per series and time bucket, the axis
they are drawn on, and the series it shows by default (what it draws over them:
`rtax.analysis.overlays`).

Why two sources (docs/dashboard.md#timeline): hourly and daily points come from the store's
summaries (`rtax.analysis.summaries`), which hold raw and folded history alike, so a month-old day
reads the same as today's. Five-minute points need the raw samples, which retention keeps only for
``raw_days``: before the oldest raw run, the five-minute view goes on with the hourly summaries,
and says so per point (``source``). The hour at the retention edge shows its raw samples only.

Percentiles follow the one definition (linear interpolation; `rtax.analysis.sketch` on summaries,
exact up to `sketch.EXACT_LIMIT` samples a point); latency counts successful rollouts only, and
success counts every rollout but rtax's own failures (``harness_error``, ``engine_error``;
docs/measurement.md#failures). A series is that of the incidents and the status board
(`rtax.store.incidents.SERIES_COLUMNS`).

Why an axis and a default of its own: opened minutes after a first start, the page drew one
five-minute bucket on an axis a millisecond wide and sixteen series at once. The axis spans the
window in view (`x_range`), and the series shown first are the few that need attention, worst
first by the status board's states (`ranked`, `default_series`). This module is pure.
"""

from __future__ import annotations

import json
import math
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import numpy as np
import pandas as pd

from rtax.analysis import sketch, stats, summaries
from rtax.analysis.status import STATES
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
    "p99",
    *stats.interval_columns((95, 99)),
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


#: The x axis spans at least this many buckets: the one point of a new install sits at the
#: right of an hour of five-minute buckets, never alone on an axis a millisecond wide.
MIN_BUCKETS = 12


def x_range(
    points: pd.DataFrame, window_s: float | None, bucket_s: int, now: pd.Timestamp
) -> tuple[pd.Timestamp, pd.Timestamp]:
    """The Timeline's x axis: the window in view, from `now` back over the sidebar's window
    (`window_s`), or for all time (None) back to the first point but at least `MIN_BUCKETS`
    buckets; widened to hold every point (a bucket may begin before the window's edge)."""
    end = _utc(now)
    first = _utc(points["bucket_start"].min()) if not points.empty else end
    if window_s is not None:
        start = end - pd.Timedelta(seconds=window_s)
    else:
        start = min(first, end - pd.Timedelta(seconds=MIN_BUCKETS * bucket_s))
    return min(start, first), end


#: The Timeline shows at most this many series by default: the few that need attention.
HANDFUL = 5


def ranked(
    known: Mapping[str, Series], board: Sequence[Any], incidents: pd.DataFrame
) -> list[tuple[str, str]]:
    """Every series of `known` (key -> `Series`, in the page's order) worst first, each with
    why it needs attention ('' when it does not): by the status board's state (`board`: its
    `status.Card`s, in `status.STATES` order; a series off the board, not probed for a week,
    after up), then by its open incidents (more first), then by how recently an incident of
    it began (a change), then in `known`'s order."""
    state = {card.key: card.state for card in board}
    opened: Counter = Counter()
    changed: dict[str, str] = {}
    if incidents is not None and not incidents.empty:
        opened.update(incidents.loc[incidents["state"] == "open", "series"])
        for key, start in zip(incidents["series"], incidents["start"], strict=True):
            changed[key] = max(changed.get(key, ""), str(_utc(start)))
    order = {s: i for i, s in enumerate(STATES)}
    position = {key: i for i, key in enumerate(known)}

    def rank(key: str) -> tuple:
        latest = pd.Timestamp(changed[key]).value if key in changed else -math.inf
        return (order.get(state.get(key, ""), len(STATES)), -opened[key], -latest, position[key])

    out = []
    for key in sorted(known, key=rank):
        why = [state[key]] if state.get(key, "up") != "up" else []
        if opened[key]:
            why.append(f"{opened[key]} open incident{'s' if opened[key] > 1 else ''}")
        out.append((key, ", ".join(why)))
    return out


def default_series(ranking: Sequence[tuple[str, str]], limit: int = HANDFUL) -> list[str]:
    """The series shown by default (`ranked`'s keys): those that need attention, worst first,
    at most `limit`; with none, the first `limit` of the ranking (the most recently changed)."""
    needy = [key for key, why in ranking if why]
    return (needy or [key for key, _ in ranking])[:limit]


def selection_note(
    ranking: Sequence[tuple[str, str]], chosen: Sequence[str], known: Mapping[str, Series]
) -> str:
    """One line on what the default selection (`chosen`) is and why, and how many are left."""
    why = dict(ranking)
    rest = len(known) - len(chosen)
    more = f"; {rest} more under Series" if rest else ""
    if chosen and why[chosen[0]]:
        named = "; ".join(f"{known[k].label} ({why[k]})" for k in chosen)
        needy = sum(1 for _, w in ranking if w)
        if needy == 1:
            return f"By default the one series that needs attention: {named}{more}."
        of = f"the {len(chosen)} of {needy}" if needy > len(chosen) else f"the {len(chosen)}"
        return f"By default {of} series that need attention, worst first: {named}{more}."
    return (
        "No series needs attention (every one up, no incident open): by default the first "
        f"{len(chosen)}, the most recently changed first{more}."
    )


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
        point.update(_tails(n, sk.quantile, sk.interval))
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


def _tails(n: int, quantile: Callable[[float], float], interval: Callable) -> dict[str, Any]:
    """A point's p50, p95 and p99 (p99 only where `n` allows, `stats.shown`) and the tails'
    95 % intervals (NaN where the bucket's samples can't bound them), from a bucket's
    `quantile(q)` and `interval(q)`: the raw and the summarized points alike."""
    out: dict[str, Any] = {"n": n}
    for q in (50, 95, 99):
        out[f"p{q}"] = stats.reported(q, n, quantile(q)) if n else math.nan
    for q in (95, 99):
        found = interval(q) if n and stats.shown(q, n) else None
        out[f"p{q}_lo"], out[f"p{q}_hi"] = found or (math.nan, math.nan)
    return out


def _quantiles(values: np.ndarray, n: int) -> dict[str, Any]:
    ordered = np.sort(values)
    return _tails(
        n,
        lambda q: float(np.percentile(ordered, q)),
        lambda q: stats.quantile_interval(ordered, q),
    )


def _utc(text: Any) -> pd.Timestamp:
    moment = pd.Timestamp(text)
    return moment.tz_localize("UTC") if moment.tzinfo is None else moment.tz_convert("UTC")
