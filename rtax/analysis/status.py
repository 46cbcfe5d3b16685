"""The status board: one card per series, its state judged by the ``[status]`` rules.

Why these states (docs/alerts.md#status): an operator glancing at the Overview wants to know
which series need a look, and why, before reading any table. A state is judged on the newest
``samples`` rollouts of the series (not the day's: a card must turn back once a slowdown is over)
and on its open incidents; the card's figures beside it are the last 24 hours':

- ``stale``: no probe at all for longer than ``stale_intervals`` times the interval of the
  plan that probes it (``stale_after`` for a series no plan schedules). Checked first: old
  samples say nothing about now.
- ``unknown``: probed, but without evidence: the newest ``samples`` rollouts all failed for
  rtax's own reasons (``harness_error``, ``engine_error``: they never reached the substrate),
  or none that reached it is within the stale limit. A state comes from evidence, so a series
  nobody could measure is neither up nor down (docs/alerts.md#status).
- ``down``: the newest ``down_after`` rollouts that reached the substrate all failed, or their
  success rate is below ``down_below``.
- ``degraded``: the success rate of the newest ``samples`` that reached it is below
  ``degraded_below``, or the p95 of their time-to-first-command is above ``p95_above`` (where
  set, per substrate or for all), or an incident of the series is open
  (`rtax.service.detection`).
- ``up``: none of these.

rtax's own failures are left out of success and of every state's samples, as everywhere
(docs/measurement.md#failures). This module is pure: frames in, cards out.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import numpy as np
import pandas as pd

from rtax.analysis import stats
from rtax.analysis.slo import Budget
from rtax.core.failures import OWN_ERRORS
from rtax.core.series import DIMENSIONS, Series

#: The states, worst first: the board's order. The substrate's own trouble (down, degraded)
#: comes before rtax's (unknown: it probes but can't measure; stale: it stopped probing), since
#: only evidence says the substrate is failing, and an unknown series is being probed right now
#: while a stale one may simply no longer be planned.
STATES = ("down", "degraded", "unknown", "stale", "up")
#: Series probed within this long are on the board (and its evidence is searched this far back).
LOOKBACK_S = 7 * 86_400
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
    #: the last 24 hours' rollouts that failed for rtax's own reasons (not in `runs_24h`)
    own_24h: int = 0
    #: the day's p99, None where `n` is too small for one (`rtax.analysis.stats.shown`)
    ttfc_p99_s: float | None = None


def judge(
    recent: pd.DataFrame,
    *,
    age_s: float | None,
    reached_age_s: float | None,
    stale_limit_s: float,
    open_incidents: int,
    substrate: str,
    rules: StatusRules,
    acknowledged: int = 0,
) -> tuple[str, tuple[str, ...]]:
    """(state, reasons) of one series from its newest rollouts (`recent`, any order), the age
    of its last probe (`age_s`) and of its last rollout that reached the substrate
    (`reached_age_s`; None: none did within `LOOKBACK_S`), and its open incidents (of which
    `acknowledged` someone is on). The substrate's states are judged on the newest
    ``rules.samples`` rollouts that reached it."""
    if age_s is None or age_s > stale_limit_s:
        since = "never probed" if age_s is None else f"last probe {_age(age_s)} ago"
        return "stale", (f"{since} (limit {_age(stale_limit_s)})",)
    newest = recent.sort_values("started_at", ascending=False)
    own = newest["error_class"].isin(OWN_ERRORS).to_numpy()
    streak = len(own) if own.all() else int(np.argmin(own))  # rtax's own errors, newest first
    too_old = reached_age_s is None or reached_age_s > stale_limit_s
    if too_old or streak >= rules.samples:
        return "unknown", (_unreached(newest.head(streak), reached_age_s, stale_limit_s),)
    newest = stats.attempts(newest).head(rules.samples)
    ok = (newest["status"] == "ok").to_numpy()
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
        text = f"{open_incidents} open incident{'s' if open_incidents > 1 else ''}"
        if acknowledged:
            text += (
                " (acknowledged)"
                if acknowledged == open_incidents
                else f" ({acknowledged} acknowledged)"
            )
        reasons.append(text)
    return ("degraded" if reasons else "up"), tuple(reasons)


def _unreached(own: pd.DataFrame, reached_age_s: float | None, stale_limit_s: float) -> str:
    """Why a series is unknown: ``the last 10 rollouts never reached the substrate:
    harness_error ×8, engine_error ×2; the last that did 3.0 h ago``."""
    classes = Counter(own["error_class"]).most_common()
    if len(own):
        plural = "s" if len(own) > 1 else ""
        what = ", ".join(f"{c} ×{n}" for c, n in classes)
        head = f"the last {len(own)} rollout{plural} never reached the substrate: {what}"
    else:
        head = "no rollout reached the substrate"
    if reached_age_s is None:
        return f"{head}; none did in the last {LOOKBACK_S // 86_400} days"
    tail = f"the last that did {_age(reached_age_s)} ago"
    if reached_age_s > stale_limit_s:
        tail += f" (limit {_age(stale_limit_s)})"
    return f"{head}; {tail}"


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
    reached: Callable[[Mapping[str, Any]], str | None] | None = None,
) -> list[Card]:
    """A card per series of `seen` (a row per series: its `SERIES` columns and ``last``, the
    newest ``started_at``), worst state first (`STATES`). `day`: per series the last 24
    hours' time-to-first-command (``runs`` (attempts), ``ok``, ``n``, ``p50``, ``p95``,
    ``p99`` (NaN where n is too small), ``harness_errors``); `recent(series)`: its newest
    runs (`COLUMNS`, within the day for the sparkline); `incidents`: the open ones;
    `budgets(series)`: the error budgets of the objectives that cover it
    (`rtax.analysis.slo.budget`); `reached(series)`: when its newest rollout that reached the
    substrate started (None: none in `LOOKBACK_S`), asked only when none of its `recent` runs
    did (without it: none did)."""
    plans = list(plans)
    by_key = {k: row for k, row in _rows(day)}
    open_by: dict[str, list[int]] = {}
    seen_to: Counter = Counter()  # acknowledged: someone is on it
    for incident in incidents:
        open_by.setdefault(str(incident["series"]), []).append(int(incident["id"]))
        if incident.get("acknowledged_at"):
            seen_to[str(incident["series"])] += 1
    out = []
    for key, row in _rows(seen):
        runs = recent(row)
        reached_at = _newest_reached(runs)
        if reached_at is None and reached is not None:
            reached_at = reached(row)
        age, reached_age = (_age_at(now, t) for t in (row["last"], reached_at))
        state, reasons = judge(
            runs,
            age_s=age,
            reached_age_s=reached_age,
            stale_limit_s=stale_limit(row, plans, rules),
            open_incidents=len(open_by.get(key, [])),
            substrate=str(row["substrate"]),
            rules=rules,
            acknowledged=seen_to[key],
        )
        figures = by_key.get(key, {})
        attempts = int(figures.get("runs", 0) or 0)
        n = int(figures.get("n", 0) or 0)
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
                spark=_spark(runs, now),
                open_incidents=tuple(open_by.get(key, [])),
                budgets=budgets(row) if budgets is not None else (),
                own_24h=int(figures.get("harness_errors", 0) or 0),
                ttfc_p99_s=_number(figures.get("p99")) if n else None,
            )
        )
    order = {s: i for i, s in enumerate(STATES)}
    return sorted(out, key=lambda c: (order[c.state], c.label))


def _newest_reached(runs: pd.DataFrame) -> str | None:
    """When the newest of `runs` that reached the substrate started (None: none did)."""
    if runs.empty:
        return None
    reached = runs.loc[~runs["error_class"].isin(OWN_ERRORS), "started_at"]
    return str(reached.max()) if len(reached) else None


def _age_at(now: datetime, moment: Any) -> float | None:
    """Seconds from `moment` (ISO text or a timestamp) to `now`, never negative (None: none)."""
    if moment is None or (isinstance(moment, float) and math.isnan(moment)):
        return None
    return max(0.0, (pd.Timestamp(now) - pd.Timestamp(moment)).total_seconds())


def _spark(runs: pd.DataFrame, now: datetime) -> tuple[tuple[str, float | None], ...]:
    """The day's rollouts that reached the substrate, oldest first: (started_at, time to first
    command, None for a failure). rtax's own errors say nothing of the substrate: left out."""
    cutoff = (pd.Timestamp(now) - pd.Timedelta(days=1)).isoformat()
    day = stats.attempts(runs[runs["started_at"] >= cutoff]).sort_values("started_at")
    return tuple(
        (str(t), _number(v) if s == "ok" else None)
        for t, s, v in zip(
            day["started_at"], day["status"], day["time_to_first_command_s"], strict=True
        )
    )


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
