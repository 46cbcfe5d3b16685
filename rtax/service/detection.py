"""One detection pass over the store: every recent series evaluated, incidents opened and
resolved (docs/alerts.md#incidents).

Why a pass over a bounded window (docs/alerts.md#detection): the scheduler runs it as a
periodic job beside probing, so its cost must not grow with history: each series reads its
newest ``window`` runs through the runs index, and only series probed within `LOOKBACK` are
looked at. What to decide is `rtax.analysis.incidents.decide`'s (pure, and the same function
the detection evaluation replays); this module reads the store, hands it what it read, and
writes what it decided: incidents opened (marked and silenced inside a maintenance window),
resolved (recovered, or accepted as the new baseline), and from how many vantages each open
one is seen.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, Protocol

from rtax.analysis import incidents, maintenance, slo
from rtax.analysis.incidents import Closing, Opening, Past, Verdict, Window, stamp
from rtax.analysis.rules import Alerts, Detection, Rule
from rtax.core.series import DIMENSIONS, Series
from rtax.store.database import Store

_log = logging.getLogger(__name__)
#: Series not probed for this long are no longer evaluated (their open incidents stay open).
LOOKBACK = timedelta(days=7)
#: The columns that make a series (`rtax.core.series`; the launch type among them: a warm
#: pool's claims and cold starts are two series, never one change).
SERIES = DIMENSIONS
#: The runs columns detection reads: a run's identity and series, its outcome, and the runs
#: column of each metric it watches (`rtax.analysis.incidents.WINDOW_COLUMNS`).
COLUMNS: tuple[str, ...] = (
    "run_id",
    *SERIES,
    *incidents.WINDOW_COLUMNS,
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
                store,
                config.detection,
                config.alerts,
                now(),
                delivering=notifier is not None,
                maintenance=getattr(config, "maintenance", ()),
                objectives=getattr(config, "slos", ()),
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
    store: Store,
    detection: Detection,
    alerts: Alerts,
    now: datetime,
    *,
    delivering: bool,
    maintenance: Sequence[maintenance.Window] = (),
    objectives: Sequence[slo.Objective] = (),
) -> Report:
    """Evaluate every series probed within `LOOKBACK` of `now`; open and resolve incidents.
    `delivering`: whether a webhook will send their alerts (else they are recorded ``off``);
    `maintenance`: the configuration's windows (the store's are read here); `objectives`:
    the SLOs whose burn-rate alerts are incidents too (docs/alerts.md#objectives-slos)."""
    report = Report()
    names = {r.name for r in alerts.rules}
    names |= {r.name for o in objectives for r in slo.burn_rules(o)}
    for incident in store.incidents.open():
        if incident["rule"] not in names:  # its rule left the configuration
            store.incidents.resolve(
                incident["id"], stamp(now), "rule_removed", at=stamp(now),
                detail="its rule was removed",
            )  # fmt: skip
            report.resolved.append(incident["id"])
    windows = [
        *maintenance,
        *_stored_windows(store, now),
    ]
    seen = store.runs.series_seen(stamp(now - LOOKBACK))
    for _, row in seen.iterrows():
        try:
            _series(store, row, detection, alerts, now, delivering, windows, objectives, report)
        except Exception:  # one series' trouble is said, and the others are still looked at
            _log.exception("detection on %s failed", Series.of(row).key)
    _quorum(store, seen, alerts.quorum)
    return report


def _stored_windows(store: Store, now: datetime) -> list[maintenance.Window]:
    return maintenance.from_rows(store.maintenance.read(ending_after=stamp(now - LOOKBACK)))


def _series(
    store: Store,
    row: Any,
    detection: Detection,
    alerts: Alerts,
    now: datetime,
    delivering: bool,
    windows: Sequence[maintenance.Window],
    objectives: Sequence[slo.Objective],
    report: Report,
) -> None:
    grouping = [row[c] for c in SERIES]
    if any(v is None or v != v for v in grouping):  # an old row without fidelity: no series
        return
    filters = dict(zip(SERIES, (str(v) for v in grouping), strict=True))
    filters["steps"] = int(row["steps"])  # sqlite binds Python ints, not numpy's
    series = Series.of(filters)
    runs = store.runs.read(columns=COLUMNS, limit=detection.window, newest_first=True, **filters)
    window = Window.from_frame(runs.iloc[::-1].reset_index(drop=True))
    open_now = {(i["metric"], i["rule"]): i for i in store.incidents.open(series.key)}
    last = {(i["metric"], i["rule"]): i for i in store.incidents.last_resolved(series.key)}

    def past(rule: Rule) -> Past:
        return Past(open_now.get((rule.metric, rule.name)), last.get((rule.metric, rule.name)))

    reached = row.get("last_reached")
    verdicts = incidents.evaluate(
        window, alerts.rules, detection, now, past, reached if isinstance(reached, str) else None
    )
    verdicts += _burning(store, series, filters, objectives, now)
    for decision in incidents.decide(verdicts, window, detection, past):
        if isinstance(decision, Closing):
            store.incidents.resolve(
                decision.incident_id, decision.end, decision.resolution, at=stamp(now),
                detail=decision.detail,
            )  # fmt: skip
            report.resolved.append(decision.incident_id)
        else:
            report.opened.append(
                _open(store, series, filters, decision, alerts, now, delivering, windows)
            )


def _burning(
    store: Store,
    series: Series,
    filters: dict[str, Any],
    objectives: Sequence[slo.Objective],
    now: datetime,
) -> list[Verdict]:
    """The burn-rate verdicts of the objectives covering `series`: the period's events
    counted in the store, the runs of the longest alert window read."""
    out: list[Verdict] = []
    for objective in objectives:
        if not objective.covers(series):
            continue
        since = stamp(now - timedelta(seconds=objective.period_s))
        (period,) = store.runs.slo_counts(objective, [since], **filters)
        reach = stamp(now - timedelta(seconds=slo.reach(objective)))
        runs = store.runs.read(columns=COLUMNS, since=reach, **filters)
        out += slo.verdicts(runs, objective, now, period=period)
    return out


def _open(
    store: Store,
    series: Series,
    filters: dict[str, Any],
    decision: Opening,
    alerts: Alerts,
    now: datetime,
    delivering: bool,
    windows: Sequence[maintenance.Window],
) -> int:
    """Store the incident a decision opens: marked with the maintenance window it began or
    opened in (whose alerts are silenced), else with its alert's state."""
    found = decision.finding
    began = datetime.fromisoformat(found.start)
    inside = maintenance.covering(windows, series, began) or maintenance.covering(
        windows, series, now
    )
    return store.incidents.add(
        {
            "series": series.key,
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
            "maintenance": inside.describe() if inside else None,
            "alert_open": "silenced"
            if inside
            else _alert_state(store, series.key, found, alerts, now, delivering),
        }
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


def _quorum(store: Store, seen: Any, quorum: int) -> None:
    """For a substrate probed from two or more vantages, record on each open incident from how
    many of them the same metric and rule are open (``2 of 3: eu, us; quorum 2 met``)."""
    if seen.empty:
        return
    vantages: dict[tuple[Any, ...], set[str]] = {}
    for row in seen.to_dict("records"):
        found = Series.of(row)
        vantages.setdefault(_without_vantage(found), set()).add(found.vantage)
    groups: dict[tuple[Any, ...], list[dict[str, Any]]] = {}
    for incident in store.incidents.open():
        found = Series.of(incident)
        if len(vantages.get(_without_vantage(found), ())) >= 2:
            key = (*_without_vantage(found), incident["metric"], incident["rule"])
            groups.setdefault(key, []).append(incident)
    for key, members in groups.items():
        every = vantages[key[:-2]]
        seeing = sorted({Series.of(i).vantage for i in members})
        met = "met" if len(seeing) >= quorum else "not met"
        text = f"{len(seeing)} of {len(every)}: {', '.join(seeing)}; quorum {quorum} {met}"
        for incident in members:
            if incident.get("vantages") != text:
                store.incidents.set_vantages(incident["id"], text)


def _without_vantage(series: Series) -> tuple[Any, ...]:
    return tuple(v for d, v in zip(DIMENSIONS, series.values(), strict=True) if d != "vantage")
