"""The status board: one card per series, its state judged by the ``[status]`` rules.

Why these states (docs/alerts.md#status): an operator glancing at the Overview wants to know
which series need a look, and why, before reading any table. A state is judged on the newest
``samples`` rollouts of the series (not the day's: a card must turn back once a slowdown is over)
and on its open incidents; the card's figures beside it are the last 24 hours':

- ``stale``: no probe for longer than ``stale_intervals`` times the interval of the plan that
  probes it (``stale_after`` for a series no plan schedules). Checked first: old samples say
  nothing about now.
- ``down``: the newest ``down_after`` rollouts all failed, or their success rate is below
  ``down_below``.
- ``degraded``: the success rate of the newest ``samples`` is below ``degraded_below``, or the
  p95 of their time-to-first-command is above ``p95_above`` (where set, per substrate or for
  all), or an incident of the series is open (`rtax.service.detection`).
- ``up``: none of these.

rtax's own failures (``harness_error``) are left out of success, as everywhere
(docs/measurement.md#failures). This module is pure: frames in, cards out.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import numpy as np
import pandas as pd

from rtax.analysis import stats
from rtax.analysis.slo import Budget
from rtax.core.series import DIMENSIONS, Series

STATES = ("up", "degraded", "down", "stale")
#: The columns that make a series (`rtax.core.series`).
SERIES = DIMENSIONS
#: The runs columns a card reads.
COLUMNS = ("started_at", "status", "error_class", "time_to_first_command_s")


@dataclass(frozen=True)
class StatusRules:
    """The ``[status]`` table (docs/alerts.md#status)."""

    #: the newest rollouts of a series its state is judged on
    samples: int = 10
    #: degraded: the p95 time-to-first-command of those above this (substrate -> seconds;
    #: ``*``: every substrate without its own); unset: no latency limit, incidents still count
    p95_above_s: Mapping[str, float] = field(default_factory=dict)
    degraded_below: float = 0.9
    down_below: float = 0.5
    down_after: int = 3
    stale_intervals: float = 3.0
    stale_after_s: float = 3600.0

    def p95_limit(self, substrate: str) -> float | None:
        return self.p95_above_s.get(substrate, self.p95_above_s.get("*"))


@dataclass(frozen=True)
class Card:
    """One series on the board: its state, why, and the last 24 hours' figures."""

    key: str
    label: str
    state: str
    reasons: tuple[str, ...]
    last_age_s: float | None
    runs_24h: int
    success_24h: float | None
    ttfc_n: int
    ttfc_p50_s: float | None
    ttfc_p95_s: float | None
    #: (started_at, time-to-first-command seconds or None for a failure), oldest first
    spark: tuple[tuple[str, float | None], ...]
    open_incidents: tuple[int, ...]
    #: the error budget left of each objective that covers it (docs/alerts.md#objectives-slos)
    budgets: tuple[Budget, ...] = ()


def judge(
    recent: pd.DataFrame,
    *,
    age_s: float | None,
    stale_limit_s: float,
    open_incidents: int,
    substrate: str,
    rules: StatusRules,
) -> tuple[str, tuple[str, ...]]:
    """(state, reasons) of one series from its newest rollouts (`recent`, any order; at most
    ``rules.samples`` are read, newest first), the age of its last probe and its open
    incidents."""
    if age_s is None or age_s > stale_limit_s:
        since = "never probed" if age_s is None else f"last probe {_age(age_s)} ago"
        return "stale", (f"{since} (limit {_age(stale_limit_s)})",)
    newest = recent.sort_values("started_at", ascending=False).head(rules.samples)
    counted = stats.attempts(newest)
    ok = (counted["status"] == "ok").to_numpy()
    reasons: list[str] = []
    if len(ok) >= rules.down_after and not ok[: rules.down_after].any():
        reasons.append(f"the last {rules.down_after} rollouts failed")
    rate = float(ok.mean()) if len(ok) else None
    if rate is not None and rate < rules.down_below:
        reasons.append(f"success {rate:.0%} of the last {len(ok)} < {rules.down_below:.0%}")
    if reasons:
        return "down", tuple(reasons)
    if rate is not None and rate < rules.degraded_below:
        reasons.append(f"success {rate:.0%} of the last {len(ok)} < {rules.degraded_below:.0%}")
    limit = rules.p95_limit(substrate)
    if limit is not None:
        values = _finite(newest.loc[newest["status"] == "ok", "time_to_first_command_s"])
        if len(values):
            p95 = float(np.percentile(values, 95))
            if p95 > limit:
                reasons.append(
                    f"p95 time-to-first-command {_secs(p95)} (n={len(values)}) > {_secs(limit)}"
                )
    if open_incidents:
        reasons.append(f"{open_incidents} open incident{'s' if open_incidents > 1 else ''}")
    return ("degraded" if reasons else "up"), tuple(reasons)


def stale_limit(series: Mapping[str, Any], plans: Iterable[Any], rules: StatusRules) -> float:
    """How long `series` may go unprobed: `stale_intervals` times the shortest interval (plus
    jitter) of the plans that probe it, else `stale_after_s`."""
    intervals = [
        float(p.interval_s) + float(p.jitter_s)
        for p in plans
        if series["substrate"] in p.substrates
        and p.tier == series["tier"]
        and int(p.steps) == int(series["steps"])
        and (p.mode is None or p.mode == series["mode"])
    ]
    return rules.stale_intervals * min(intervals) if intervals else rules.stale_after_s


def cards(
    seen: pd.DataFrame,
    day: pd.DataFrame,
    recent: Callable[[Mapping[str, Any]], pd.DataFrame],
    incidents: Sequence[Mapping[str, Any]],
    plans: Iterable[Any],
    rules: StatusRules,
    now: datetime,
    budgets: Callable[[Mapping[str, Any]], tuple[Budget, ...]] | None = None,
) -> list[Card]:
    """A card per series of `seen` (a row per series: its `SERIES` columns and ``last``, the
    newest ``started_at``). `day`: per series the last 24 hours' time-to-first-command
    (``runs`` (attempts), ``ok``, ``n``, ``p50``, ``p95``); `recent(series)`: its newest runs
    (`COLUMNS`, within the day for the sparkline); `incidents`: the open ones; `budgets(series)`:
    the error budgets of the objectives that cover it (`rtax.analysis.slo.budget`)."""
    plans = list(plans)
    by_key = {k: row for k, row in _rows(day)}
    open_by: dict[str, list[int]] = {}
    for incident in incidents:
        open_by.setdefault(str(incident["series"]), []).append(int(incident["id"]))
    out = []
    for key, row in _rows(seen):
        last = pd.Timestamp(row["last"])
        age = max(0.0, (pd.Timestamp(now) - last).total_seconds())
        runs = recent(row)
        state, reasons = judge(
            runs,
            age_s=age,
            stale_limit_s=stale_limit(row, plans, rules),
            open_incidents=len(open_by.get(key, [])),
            substrate=str(row["substrate"]),
            rules=rules,
        )
        figures = by_key.get(key, {})
        attempts = int(figures.get("runs", 0) or 0)
        n = int(figures.get("n", 0) or 0)
        cutoff = (pd.Timestamp(now) - pd.Timedelta(days=1)).isoformat()
        spark = runs[runs["started_at"] >= cutoff].sort_values("started_at")
        out.append(
            Card(
                key=key,
                label=label(row),
                state=state,
                reasons=reasons,
                last_age_s=age,
                runs_24h=attempts,
                success_24h=figures["ok"] / attempts if attempts else None,
                ttfc_n=n,
                ttfc_p50_s=_number(figures.get("p50")) if n else None,
                ttfc_p95_s=_number(figures.get("p95")) if n else None,
                spark=tuple(
                    (str(t), _number(v) if s == "ok" else None)
                    for t, s, v in zip(
                        spark["started_at"],
                        spark["status"],
                        spark["time_to_first_command_s"],
                        strict=True,
                    )
                ),
                open_incidents=tuple(open_by.get(key, [])),
                budgets=budgets(row) if budgets is not None else (),
            )
        )
    order = {s: i for i, s in enumerate(("down", "degraded", "stale", "up"))}
    return sorted(out, key=lambda c: (order[c.state], c.label))


def label(series: Mapping[str, Any]) -> str:
    """A series as a person reads it, the pages' series and workload labels together:
    ``docker · session · T2 S=50``, ``daytona [emulated] · T0``."""
    return Series.of(series).label


def sparkline(
    points: Sequence[tuple[str, float | None]], width: int = 220, height: int = 36
) -> str:
    """An inline SVG of the points' values in order (log scale: latencies spread over
    decades), failures as red ticks at the bottom. Text, not a chart object: a board of dozens
    of cards renders in milliseconds."""
    values = [v for _, v in points if v is not None and v > 0]
    marks = []
    if len(points) >= 1:
        step = width / max(len(points) - 1, 1)
        lo, hi = (math.log(min(values)), math.log(max(values))) if values else (0.0, 0.0)
        span = hi - lo
        line = []
        for i, (_, v) in enumerate(points):
            x = round(i * step, 1)
            if v is None or v <= 0:
                marks.append(f'<line x1="{x}" y1="{height}" x2="{x}" y2="{height - 6}" />')
                continue
            level = (math.log(v) - lo) / span if span else 0.5  # a flat line: mid-height
            y = round(height - 3 - level * (height - 8), 1)
            line.append(f"{x},{y}")
        if len(line) == 1:
            x, y = line[0].split(",")
            marks.append(f'<circle cx="{x}" cy="{y}" r="2" fill="#1f77b4" />')
        elif line:
            marks.append(
                f'<polyline fill="none" stroke="#1f77b4" stroke-width="1.5" '
                f'points="{" ".join(line)}" />'
            )
    body = "".join(m if "circle" in m or "polyline" in m else _red(m) for m in marks)
    return (
        f'<svg xmlns="http://www.w3.org/2000/svg" width="100%" height="{height}" '
        f'viewBox="0 0 {width} {height}" preserveAspectRatio="none" role="img" '
        f'aria-label="sparkline">{body}</svg>'
    )


def _red(mark: str) -> str:
    return mark.replace("<line ", '<line stroke="#d62728" stroke-width="1.5" ')


def _rows(frame: pd.DataFrame) -> list:
    if frame is None or frame.empty:
        return []
    return [(Series.of(row).key, row) for row in frame.to_dict("records")]


def _finite(values: pd.Series) -> np.ndarray:
    arr = pd.to_numeric(values, errors="coerce").to_numpy(dtype=float)
    return arr[np.isfinite(arr)]


def _number(value: Any) -> float | None:
    try:
        out = float(value)
    except (TypeError, ValueError):
        return None
    return out if math.isfinite(out) else None


def _secs(seconds: float) -> str:
    return f"{seconds * 1000:.0f} ms" if seconds < 1 else f"{seconds:.3g} s"


def _age(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"
