"""What opens and what resolves an incident of one series: pure functions of its recent runs.

Why one engine for the scheduler and the evaluation (docs/alerts.md#incidents): an incident's
life is decided here, from the series' newest runs (a `Window`) and what is known of each rule's
past incidents (`Past`), as a list of `Opening`s and `Closing`s. The scheduler's detection pass
(`rtax.service.detection`) reads the store, calls `decide` and writes what it says; the
detection evaluation (`rtax.analysis.replay`) calls the same `decide` one sample at a time over
labelled series, so its table measures the code path that alerts.

The rules (docs/alerts.md#rules), per series and rule:

- ``change_above`` on a latency: the newest change point of the latency of successful rollouts
  (`rtax.analysis.changepoint.detect`) is a rise by at least the ratio; on ``success_rate``,
  the newest stretch of failures (`changepoint.newest_success_change`) is a drop with before /
  after at least the ratio. It resolves as **recovered** when the newest ``recovery_samples``
  samples since it began are back on the old side of the midpoint (the geometric one for
  latency), or as **baseline** once ``baseline_samples`` samples have come at the new level
  without returning: the new level is accepted, and detection of that rule goes on from the
  incident's start, so a further change is measured against the new level.
- ``p95_above`` / ``success_below``: over the newest ``samples`` successful rollouts
  (rollouts); with fewer there is no verdict; resolves when the same window no longer breaches.
- ``stale_after``: no rollout that reached the substrate for that long (rtax's own errors are
  no evidence of it); resolves when one does.
- A new incident of a rule begins after its last one ended: a change already resolved is not
  opened again, and a threshold breaching again opens with the sample that breached.

Failed rollouts never enter latency (docs/measurement.md#failures); rtax's own errors
(`OWN_ERRORS`) never enter success.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import numpy as np
import pandas as pd

from rtax.analysis import changepoint
from rtax.analysis.rules import Detection, Rule
from rtax.core.failures import OWN_ERRORS

#: The runs column of each latency metric.
COLUMNS = {"time_to_first_command": "time_to_first_command_s", "episode": "episode_s"}
#: The runs columns a `Window` reads.
WINDOW_COLUMNS: tuple[str, ...] = ("started_at", "status", "error_class", *COLUMNS.values())
#: Why an incident was resolved (the ``resolution`` column).
RESOLUTIONS: tuple[str, ...] = ("recovered", "baseline", "manual", "rule_removed")
#: Rules whose incidents are about a level, which a change can be accepted as.
CHANGE = "change_above"


@dataclass(frozen=True)
class Finding:
    """A breach of one rule, as an incident would record it."""

    metric: str
    rule: str
    detector: str  # "binseg" or "scan" for a change, "threshold" for a rule, "burn_rate"
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


@dataclass(frozen=True)
class Past:
    """What is known of one rule's incidents on one series: the open one and the newest resolved
    one (incident rows: at least ``id``, ``metric``, ``start``, ``end``, ``before_p50``,
    ``after_p50``, ``resolution``)."""

    open: Mapping[str, Any] | None = None
    last: Mapping[str, Any] | None = None


@dataclass(frozen=True)
class Opening:
    rule: Rule
    finding: Finding


@dataclass(frozen=True)
class Closing:
    incident_id: int
    #: the newest sample the verdict read
    end: str
    resolution: str
    #: replaces the incident's detail when set (what the resolved alert says)
    detail: str | None = None


@dataclass(frozen=True)
class Samples:
    """One metric's samples of a window, oldest first: ``started_at`` (ISO text, which compares
    as time) and values (seconds, or 1 per ok rollout and 0 per failure)."""

    started_at: np.ndarray
    values: np.ndarray

    def __len__(self) -> int:
        return len(self.values)

    def since(self, moment: str) -> Samples:
        """The samples from `moment` on."""
        i = int(np.searchsorted(self.started_at, moment, side="left"))
        return Samples(self.started_at[i:], self.values[i:])


@dataclass(frozen=True)
class Window:
    """One series' newest runs as arrays, oldest first: what every rule reads, built once per
    pass (`from_frame`) or sliced from a longer recording (`rtax.analysis.replay`)."""

    substrate: str
    started_at: np.ndarray
    ok: np.ndarray
    own: np.ndarray  # rtax's own failure: no evidence about the substrate
    latency: Mapping[str, np.ndarray]  # metric -> seconds (NaN: failed or not measured)

    @classmethod
    def from_frame(cls, runs: pd.DataFrame) -> Window:
        """A window of runs (`WINDOW_COLUMNS` and ``substrate``), oldest first."""
        return cls(
            substrate=str(runs["substrate"].iloc[-1]) if len(runs) else "",
            started_at=runs["started_at"].astype(str).to_numpy(),
            ok=(runs["status"] == "ok").to_numpy(),
            own=runs["error_class"].isin(OWN_ERRORS).to_numpy(),
            latency={
                metric: pd.to_numeric(runs[column], errors="coerce").to_numpy(dtype=float)
                for metric, column in COLUMNS.items()
            },
        )

    def __len__(self) -> int:
        return len(self.started_at)

    def samples(self, metric: str) -> Samples:
        """The samples `metric` is judged on: the latency of successful rollouts, or success of
        every rollout that reached the substrate."""
        if metric == "success_rate":
            keep = ~self.own
            return Samples(self.started_at[keep], self.ok[keep].astype(float))
        values = self.latency[metric]
        with np.errstate(invalid="ignore"):
            keep = self.ok & np.isfinite(values) & (values > 0)
        return Samples(self.started_at[keep], values[keep])

    def last_reached(self) -> str | None:
        """When the newest rollout that reached the substrate started (None: none here)."""
        reached = self.started_at[~self.own]
        return str(reached[-1]) if len(reached) else None


def stamp(moment: datetime) -> str:
    """The store's timestamp format (that of ``started_at``), which compares as text."""
    return moment.astimezone(UTC).isoformat(timespec="microseconds")


def decide(
    verdicts: Sequence[Verdict],
    window: Window,
    detection: Detection,
    past: Callable[[Rule], Past],
) -> list[Opening | Closing]:
    """What the verdicts mean for each rule's incidents: an open one closes (recovered, or
    accepted as the new baseline), a finding with none open opens one, if it began after the
    rule's last incident ended."""
    out: list[Opening | Closing] = []
    for verdict in verdicts:
        rule, known = verdict.rule, past(verdict.rule)
        if known.open is not None:
            closing = _closing(verdict, known.open, window, detection)
            if closing is not None:
                out.append(closing)
            continue
        found = verdict.finding
        if found is None:
            continue
        ended = known.last.get("end") if known.last else None
        if ended and found.start <= ended:
            if rule.condition == CHANGE:  # the change its last incident was about
                continue
            found = _restarted(found, verdict.newest or found.start)
        out.append(Opening(rule, found))
    return out


def _restarted(found: Finding, newest: str) -> Finding:
    """A threshold breach that began before the rule's last incident ended breaches again
    now: it opens at the newest sample (a re-breach opens when it happens)."""
    return Finding(**{**found.__dict__, "start": newest})


def _closing(
    verdict: Verdict, incident: Mapping[str, Any], window: Window, detection: Detection
) -> Closing | None:
    end = verdict.newest or str(incident["start"])
    if verdict.rule.condition != CHANGE:
        done = verdict.known and verdict.finding is None
        return Closing(int(incident["id"]), end, "recovered") if done else None
    data = window.samples(verdict.rule.metric).since(str(incident["start"]))
    if recovered(incident, data, detection):
        return Closing(int(incident["id"]), end, "recovered")
    if len(data) >= detection.baseline_samples:
        level = _level(incident["metric"], data.values)
        detail = (
            f"{incident.get('detail') or ''}; accepted as the new baseline after {len(data)} "
            f"samples at {level}"
        ).lstrip("; ")
        return Closing(int(incident["id"]), end, "baseline", detail)
    return None


def _level(metric: str, values: np.ndarray) -> str:
    if metric == "success_rate":
        return f"success {float(values.mean()):.0%}"
    return f"p50 {float(np.median(values)):.3f} s"


def evaluate(
    window: Window,
    rules: Sequence[Rule],
    detection: Detection,
    now: datetime,
    past: Callable[[Rule], Past] = lambda _: Past(),
    last_reached: str | None = None,
) -> list[Verdict]:
    """Each rule that applies to the series of `window` (its newest runs, oldest first).
    `last_reached`: when its newest rollout that reached the substrate started, if older than
    the window holds (staleness); `past` cuts a change rule's samples at an accepted baseline."""
    if not len(window):
        return []
    out = []
    for rule in rules:
        if not rule.applies(window.substrate):
            continue
        if rule.condition == "stale_after":
            out.append(_stale(rule, window.last_reached() or last_reached, now))
            continue
        data = window.samples(rule.metric)
        newest = str(data.started_at[-1]) if len(data) else None
        if rule.condition == CHANGE:
            last = past(rule).last
            if last and last.get("resolution") in ("baseline", "manual"):
                data = data.since(str(last["start"]))  # detection goes on from the new level
            out.append(Verdict(rule, True, _change(rule, data, detection), newest))
        elif len(data) < rule.samples:
            out.append(Verdict(rule, False, None, newest))
        else:
            out.append(Verdict(rule, True, _threshold(rule, data), newest))
    return out


def _stale(rule: Rule, last: str | None, now: datetime) -> Verdict:
    if last is None:
        return Verdict(rule, False, None, None)
    age = (now - datetime.fromisoformat(last)).total_seconds()
    if age <= rule.limit:
        return Verdict(rule, True, None, last)
    start = stamp(datetime.fromisoformat(last) + timedelta(seconds=rule.limit))
    detail = (
        f"no rollout reached the substrate for {age / 60:.0f} min (limit {rule.limit / 60:.0f} min)"
    )
    finding = Finding(
        rule.metric, rule.name, "threshold", start, None, None, age / rule.limit, detail
    )
    return Verdict(rule, True, finding, last)


def _threshold(rule: Rule, data: Samples) -> Finding | None:
    """A ``p95_above`` or ``success_below`` breach over the newest `samples` samples."""
    window, before = data.values[-rule.samples :], data.values[: -rule.samples]
    stamps = data.started_at[-rule.samples :]
    if rule.condition == "p95_above":
        p95 = float(np.percentile(window, 95))
        if p95 <= rule.limit:
            return None
        first = stamps[window > rule.limit][0]
        detail = f"p95 {p95:.3f} s over the last {len(window)} > {rule.limit:g} s"
        return Finding(
            rule.metric, rule.name, "threshold", str(first),
            _p50(before), float(np.median(window)), p95 / rule.limit, detail,
        )  # fmt: skip
    rate = float(window.mean())
    if rate >= rule.limit:
        return None
    first = stamps[window == 0][0]
    detail = f"success {rate:.0%} over the last {len(window)} < {rule.limit:.0%}"
    magnitude = rule.limit / rate if rate > 0 else None
    before_rate = float(before.mean()) if len(before) else None
    return Finding(
        rule.metric, rule.name, "threshold", str(first), before_rate, rate, magnitude, detail
    )


def _change(rule: Rule, data: Samples, detection: Detection) -> Finding | None:
    """The newest change of the series if it is a degradation of at least the rule's ratio
    that has not already returned."""
    is_rate = rule.metric == "success_rate"
    if is_rate:
        change = changepoint.newest_success_change(data.values, detection.success)
        if change is None:
            return None
        before, after = change.before, change.after
        magnitude = before / after if after > 0 else math.inf
    else:
        change = changepoint.newest_change(data.values, detection.latency)
        if change is None or change.direction < 0:
            return None
        before, after = change.before, change.after
        magnitude = after / before
    if magnitude < rule.limit or len(data) - change.index >= detection.baseline_samples:
        return None  # too small, or a level held long enough to be the baseline already
    start = str(data.started_at[change.index])
    finding = Finding(
        rule.metric, rule.name, "scan" if is_rate else "binseg", start, before, after,
        magnitude if math.isfinite(magnitude) else None,
        _describe(rule.metric, before, after, len(data) - change.index, change.statistic),
    )  # fmt: skip
    incident = {"metric": rule.metric, "start": start, "before_p50": before, "after_p50": after}
    return None if recovered(incident, data.since(start), detection) else finding


def recovered(incident: Mapping[str, Any], since: Samples, detection: Detection) -> bool:
    """Whether a change incident's series has returned: the newest `recovery_samples` of
    its samples since the incident began (`since`) are back on the old side of the midpoint."""
    recent = since.values[-detection.recovery_samples :]
    if len(recent) < detection.recovery_samples:
        return False
    before, after = incident["before_p50"], incident["after_p50"]
    if incident["metric"] == "success_rate":
        return float(recent.mean()) >= (before + after) / 2
    return float(np.median(recent)) <= math.sqrt(before * after)


def _describe(metric: str, before: float, after: float, n_after: int, statistic: float) -> str:
    if metric == "success_rate":
        change = f"success {before:.0%} -> {after:.0%}"
        test = f"binomial scan, 1 in {10**statistic:,.0f}"
    else:
        change = f"{metric.replace('_', ' ')} p50 {before:.3f} s -> {after:.3f} s"
        test = f"rank binary segmentation, T = {statistic:.1f}"
    return f"{change} ({test}, {n_after} samples since)"


def _p50(values: np.ndarray) -> float | None:
    return float(np.median(values)) if len(values) else None


def state_of(incident: Mapping[str, Any]) -> str:
    """An incident's place in its lifecycle as a person reads it: ``open``, ``acknowledged``,
    or ``resolved`` with why (``resolved: baseline``)."""
    if incident.get("state") == "resolved":
        why = incident.get("resolution")
        return f"resolved: {why}" if isinstance(why, str) and why else "resolved"
    return "acknowledged" if _text(incident.get("acknowledged_at")) else "open"


def listing(frame: pd.DataFrame) -> list[str]:
    """`rtax incidents`' lines: a header, then one line per incident (its state, when it
    began and ended, series, metric, rule, magnitude, detail, its alert, and where set the
    maintenance window it opened in, the vantages that see it and the notes)."""
    if frame.empty:
        return ["no incidents"]
    lines = [
        f"{'id':>5}  {'state':<20}  {'start':<19}  {'end':<19}  series / metric (rule): change"
    ]
    for row in frame.to_dict("records"):
        end = _text(row.get("end"))[:19]
        magnitude = "" if pd.isna(row["magnitude"]) else f" x{row['magnitude']:.2f}"
        alert = row["alert_open"] if pd.isna(row["alert_resolved"]) else row["alert_resolved"]
        extra = [
            f"{label} {_text(row.get(column))}"
            for label, column in (
                ("maintenance:", "maintenance"),
                ("seen from", "vantages"),
                ("ack:", "acknowledged_note"),
                ("note:", "note"),
            )
            if _text(row.get(column))
        ]
        lines.append(
            f"{row['id']:>5}  {state_of(row):<20}  {row['start'][:19]:<19}  {end:<19}  "
            f"{row['series']} / {row['metric']} ({row['rule']}){magnitude}: {row['detail']}"
            f" [alert {alert}]" + "".join(f" [{e}]" for e in extra)
        )
    return lines


def _text(value: Any) -> str:
    return value if isinstance(value, str) else ""
