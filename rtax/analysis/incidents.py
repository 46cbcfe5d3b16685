"""What opens and what resolves an incident of one series: pure functions of its recent runs.

The definitions (docs/alerts.md#incidents), per series (substrate × tier × steps × mode ×
fidelity) and rule:

- ``change_above`` on a latency: the newest change point of the log latency of successful
  rollouts (`rtax.analysis.changepoint`) is a rise by at least the ratio. On ``success_rate``: the
  newest change of success (1 per ok rollout, 0 per failure; rtax's own ``harness_error`` left out)
  is a drop, before / after at least the ratio. It resolves when the series returns: the median
  latency (the success rate) of the newest ``recovery_samples`` samples since it began is back
  on the old side of the midpoint (for latency the geometric one, √(before × after)).
- ``p95_above`` / ``success_below``: over the newest ``samples`` successful rollouts (rollouts),
  with fewer there is no verdict; resolves when the same window no longer breaches.
- ``stale_after``: no probe of the series for that long; resolves at the next probe.

Failed rollouts never enter latency (docs/measurement.md#failures).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import numpy as np
import pandas as pd

from rtax.analysis import changepoint, stats
from rtax.analysis.rules import Detection, Rule

#: The runs column of each latency metric.
COLUMNS = {"time_to_first_command": "time_to_first_command_s", "episode": "episode_s"}


@dataclass(frozen=True)
class Finding:
    """A breach of one rule, as an incident would record it."""

    metric: str
    rule: str
    detector: str  # "binseg" or "threshold"
    start: str
    before_p50: float | None
    after_p50: float | None
    magnitude: float | None  # None: unbounded (a success rate down to 0)
    detail: str


@dataclass(frozen=True)
class Verdict:
    """A rule's answer for a series now: `known` False when there is too little data to
    tell (neither opens nor resolves); `finding` when it is breached."""

    rule: Rule
    known: bool
    finding: Finding | None
    #: the newest sample the verdict read (an incident that resolves ends there)
    newest: str | None = None


def stamp(moment: datetime) -> str:
    """The store's timestamp format (that of ``started_at``), which compares as text."""
    return moment.astimezone(UTC).isoformat(timespec="microseconds")


def latency(runs: pd.DataFrame, metric: str) -> pd.DataFrame:
    """(started_at, value) of the successful runs with a finite `metric`, oldest first."""
    ok = stats.successful(runs)
    values = pd.to_numeric(ok[COLUMNS[metric]], errors="coerce")
    frame = pd.DataFrame({"started_at": ok["started_at"], "value": values})
    return frame[np.isfinite(frame["value"]) & (frame["value"] > 0)]


def success(runs: pd.DataFrame) -> pd.DataFrame:
    """(started_at, value) with value 1 per ok rollout, 0 per failure, oldest first."""
    counted = stats.attempts(runs)
    return pd.DataFrame(
        {"started_at": counted["started_at"], "value": (counted["status"] == "ok").astype(float)}
    )


def samples(runs: pd.DataFrame, metric: str) -> pd.DataFrame:
    return success(runs) if metric == "success_rate" else latency(runs, metric)


def evaluate(
    runs: pd.DataFrame, rules: tuple[Rule, ...], detection: Detection, now: datetime
) -> list[Verdict]:
    """Each rule that applies to the series of `runs` (its newest runs, oldest first)."""
    if runs.empty:
        return []
    substrate = str(runs["substrate"].iloc[-1])
    return [_verdict(r, runs, detection, now) for r in rules if r.applies(substrate)]


def _verdict(rule: Rule, runs: pd.DataFrame, detection: Detection, now: datetime) -> Verdict:
    if rule.condition == "stale_after":
        last = str(runs["started_at"].max())
        age = (now - datetime.fromisoformat(last)).total_seconds()
        if age <= rule.limit:
            return Verdict(rule, True, None, last)
        start = stamp(datetime.fromisoformat(last) + timedelta(seconds=rule.limit))
        detail = f"no probe for {age / 60:.0f} min (limit {rule.limit / 60:.0f} min)"
        return Verdict(
            rule, True, Finding(rule.metric, rule.name, "threshold", start, None, None,
                                age / rule.limit, detail), last
        )  # fmt: skip
    data = samples(runs, rule.metric)
    newest = str(data["started_at"].iloc[-1]) if len(data) else None
    if rule.condition == "change_above":
        return Verdict(rule, True, _change(rule, data, detection), newest)
    if len(data) < rule.samples:
        return Verdict(rule, False, None, newest)
    window, before = data.iloc[-rule.samples :], data.iloc[: -rule.samples]
    if rule.condition == "p95_above":
        p95 = stats.percentile(window["value"], 95)
        if p95 <= rule.limit:
            return Verdict(rule, True, None, newest)
        above = window[window["value"] > rule.limit]
        detail = f"p95 {p95:.3f} s over the last {len(window)} > {rule.limit:g} s"
        finding = Finding(
            rule.metric, rule.name, "threshold", str(above["started_at"].iloc[0]),
            _p50(before), _p50(window), p95 / rule.limit, detail,
        )  # fmt: skip
        return Verdict(rule, True, finding, newest)
    rate = float(window["value"].mean())
    if rate >= rule.limit:
        return Verdict(rule, True, None, newest)
    failed = window[window["value"] == 0]
    detail = f"success {rate:.0%} over the last {len(window)} < {rule.limit:.0%}"
    magnitude = rule.limit / rate if rate > 0 else None
    before_rate = float(before["value"].mean()) if len(before) else None
    finding = Finding(
        rule.metric, rule.name, "threshold", str(failed["started_at"].iloc[0]),
        before_rate, rate, magnitude, detail,
    )  # fmt: skip
    return Verdict(rule, True, finding, newest)


def _change(rule: Rule, data: pd.DataFrame, detection: Detection) -> Finding | None:
    """The newest change of the series if it is a degradation of at least the rule's ratio
    that has not already returned."""
    is_rate = rule.metric == "success_rate"
    values = data["value"].tolist()
    if not is_rate:
        values = changepoint.log_seconds(values)
    params = detection.success if is_rate else detection.latency
    changes = changepoint.detect(values, params)
    if not changes:
        return None
    last = changes[-1]
    if is_rate:
        before, after = last.before, last.after
        worse = last.direction < 0
        magnitude = before / after if after > 0 else math.inf
    else:
        before, after = math.exp(last.before), math.exp(last.after)
        worse = last.direction > 0
        magnitude = after / before
    if not worse or magnitude < rule.limit:
        return None
    start = str(data["started_at"].iloc[last.index])
    finding = Finding(
        rule.metric, rule.name, "binseg", start, before, after,
        magnitude if math.isfinite(magnitude) else None,
        _describe(rule.metric, before, after, len(data) - last.index, last.statistic),
    )  # fmt: skip
    incident = {"metric": rule.metric, "start": start, "before_p50": before, "after_p50": after}
    return None if recovered(incident, data, detection) else finding


def recovered(incident: dict[str, Any], data: pd.DataFrame, detection: Detection) -> bool:
    """Whether a change incident's series has returned: its newest `recovery_samples`
    samples since the incident began are back on the old side of the midpoint."""
    since = data[data["started_at"] >= incident["start"]]
    recent = since["value"].iloc[-detection.recovery_samples :]
    if len(recent) < detection.recovery_samples:
        return False
    before, after = incident["before_p50"], incident["after_p50"]
    if incident["metric"] == "success_rate":
        return float(recent.mean()) >= (before + after) / 2
    return float(recent.median()) <= math.sqrt(before * after)


def _describe(metric: str, before: float, after: float, n_after: int, statistic: float) -> str:
    if metric == "success_rate":
        change = f"success {before:.0%} -> {after:.0%}"
    else:
        change = f"{metric.replace('_', ' ')} p50 {before:.3f} s -> {after:.3f} s"
    return f"{change} (binary segmentation, T = {statistic:.1f}, {n_after} samples since)"


def _p50(frame: pd.DataFrame) -> float | None:
    return stats.percentile(frame["value"], 50) if len(frame) else None


def listing(frame: pd.DataFrame) -> list[str]:
    """`rtax incidents`' lines: a header, then one line per incident (its state, when it
    began and ended, series, metric, rule, before -> after, magnitude, detail)."""
    if frame.empty:
        return ["no incidents"]
    lines = [f"{'id':>5}  {'state':<8}  {'start':<19}  {'end':<19}  series / metric (rule): change"]
    for row in frame.to_dict("records"):
        end = "" if pd.isna(row["end"]) else str(row["end"])[:19]
        magnitude = "" if pd.isna(row["magnitude"]) else f" x{row['magnitude']:.2f}"
        alert = row["alert_open"] if pd.isna(row["alert_resolved"]) else row["alert_resolved"]
        lines.append(
            f"{row['id']:>5}  {row['state']:<8}  {row['start'][:19]:<19}  {end:<19}  "
            f"{row['series']} / {row['metric']} ({row['rule']}){magnitude}: {row['detail']}"
            f" [alert {alert}]"
        )
    return lines
