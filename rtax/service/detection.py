"""One detection pass over the store: every recent series evaluated, incidents opened and
resolved (docs/alerts.md#incidents).

Why a pass over a bounded window (docs/alerts.md#detection): the scheduler runs it as a
periodic job beside probing, so its cost must not grow with history: each series reads its
newest ``window`` runs through the runs index, and only series probed within `LOOKBACK` are
looked at. What to decide is `rtax.analysis.incidents`' (pure); this module reads and writes the
store.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, Protocol

from rtax.analysis import incidents
from rtax.analysis.incidents import stamp
from rtax.analysis.rules import Alerts, Detection
from rtax.core.series import DIMENSIONS, Series
from rtax.store.database import Store

_log = logging.getLogger(__name__)
#: Series not probed for this long are no longer evaluated (their open incidents stay open).
LOOKBACK = timedelta(days=7)
#: The columns that make a series (`rtax.core.series`; the launch type among them: a warm
#: pool's claims and cold starts are two series, never one change).
SERIES = DIMENSIONS
#: The runs columns detection reads: a run's identity and series, its outcome, and the runs
#: column of each metric it watches (`rtax.analysis.incidents.COLUMNS`).
COLUMNS: tuple[str, ...] = (
    *("run_id", "started_at"),
    *SERIES,
    *("status", "error_class"),
    *incidents.COLUMNS.values(),
)


@dataclass
class Report:
    """The ids of the incidents a pass opened and resolved."""

    opened: list[int] = field(default_factory=list)
    resolved: list[int] = field(default_factory=list)


class _Wakeable(Protocol):
    def wake(self) -> None: ...


def run(
    open_store: Callable[[], Store],
    config: Any,
    notifier: _Wakeable | None,
    log: logging.Logger,
    now: Callable[[], datetime] = lambda: datetime.now(UTC),
) -> Report | None:
    """The scheduler's periodic pass: `check` on a connection of its own, its outcome logged,
    the notifier woken when incidents opened or resolved. A bounded read per series and a few
    writes, so it needs no probe slot; any failure is logged (None) and the next pass retries."""
    try:
        with open_store() as store:
            report = check(
                store, config.detection, config.alerts, now(), delivering=notifier is not None
            )
    except Exception:
        log.exception("detection failed; it runs again in %g s", config.detection.interval_s)
        return None
    if report.opened or report.resolved:
        log.info("incidents: %d opened, %d resolved", len(report.opened), len(report.resolved))
        if notifier is not None:
            notifier.wake()
    return report


def check(
    store: Store, detection: Detection, alerts: Alerts, now: datetime, *, delivering: bool
) -> Report:
    """Evaluate every series probed within `LOOKBACK` of `now`; open and resolve incidents.
    `delivering`: whether a webhook will send their alerts (else they are recorded ``off``)."""
    report = Report()
    rules = {r.name: r for r in alerts.rules}
    for incident in store.incidents.open():
        if incident["rule"] not in rules:  # its rule left the configuration
            store.incidents.resolve(incident["id"], stamp(now), "its rule was removed")
            report.resolved.append(incident["id"])
    seen = store.runs.series_seen(stamp(now - LOOKBACK))
    for _, row in seen.iterrows():
        try:
            _series(store, row, detection, alerts, now, delivering, report)
        except Exception:  # one series' trouble is said, and the others are still looked at
            _log.exception("detection on %s failed", Series.of(row).key)
    return report


def _series(
    store: Store,
    row: Any,
    detection: Detection,
    alerts: Alerts,
    now: datetime,
    delivering: bool,
    report: Report,
) -> None:
    grouping = [row[c] for c in SERIES]
    if any(v is None or v != v for v in grouping):  # an old row without fidelity: no series
        return
    filters = dict(zip(SERIES, (str(v) for v in grouping), strict=True))
    filters["steps"] = int(row["steps"])  # sqlite binds Python ints, not numpy's
    key = Series.of(filters).key
    runs = store.runs.read(columns=COLUMNS, limit=detection.window, newest_first=True, **filters)
    runs = runs.iloc[::-1].reset_index(drop=True)
    open_now = {(i["metric"], i["rule"]): i for i in store.incidents.open(key)}
    for verdict in incidents.evaluate(runs, alerts.rules, detection, now):
        rule = verdict.rule
        incident = open_now.get((rule.metric, rule.name))
        if incident is not None:
            if rule.condition == "change_above":
                data = incidents.samples(runs, rule.metric)
                done = incidents.recovered(incident, data, detection)
            else:
                done = verdict.known and verdict.finding is None
            if done:
                store.incidents.resolve(incident["id"], verdict.newest or stamp(now))
                report.resolved.append(incident["id"])
            continue
        found = verdict.finding
        if found is None or store.incidents.started(key, found.metric, found.rule, found.start):
            continue
        report.opened.append(
            store.incidents.add(
                {
                    "series": key,
                    **filters,
                    "metric": found.metric,
                    "rule": found.rule,
                    "detector": found.detector,
                    "start": found.start,
                    "opened_at": stamp(now),
                    "before_p50": found.before_p50,
                    "after_p50": found.after_p50,
                    "magnitude": found.magnitude,
                    "detail": found.detail,
                    "alert_open": _alert_state(store, key, found, alerts, now, delivering),
                }
            )
        )


def _alert_state(
    store: Store,
    key: str,
    found: incidents.Finding,
    alerts: Alerts,
    now: datetime,
    delivering: bool,
) -> str:
    """pending, or suppressed within the cool-down of the last alerting incident of the same
    series, metric and rule, or off without a webhook."""
    if not delivering:
        return "off"
    last = store.incidents.last_alerted(key, found.metric, found.rule)
    if last and (now - datetime.fromisoformat(last)).total_seconds() < alerts.cooldown_s:
        return "suppressed"
    return "pending"
