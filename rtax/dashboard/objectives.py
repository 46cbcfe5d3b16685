"""The objectives' figures the dashboard shows: each card's error budgets and the Timeline's
standings, read through the runs index (`rtax.store.runs.Runs.slo_counts`).

Why a module of its own (docs/alerts.md#objectives-slos): the status board and the Timeline
count the same SLI events the same way, one indexed read per objective and series (the
period and every alert window at once), and `rtax.dashboard.data` keeps only the cached
readers that open the store and call these.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any

import pandas as pd

from rtax.analysis import slo, status
from rtax.analysis.incidents import stamp
from rtax.core.series import Series
from rtax.store import Store


def series_filters(row: Mapping[str, Any]) -> dict[str, Any]:
    """A series row's dimensions as the store's filters (sqlite binds Python ints, not
    numpy's)."""
    wanted = {c: row[c] for c in status.SERIES}
    wanted["steps"] = int(row["steps"])
    return wanted


def _ago(now: datetime, seconds: float) -> str:
    return stamp(now - timedelta(seconds=seconds))


def budgets(
    store: Store, objectives: Iterable[slo.Objective], row: Mapping[str, Any], now: datetime
) -> tuple[slo.Budget, ...]:
    """The error budget of each objective that covers the series of `row`, over its period
    ending `now`."""
    found = Series.of(row)
    out = []
    for objective in (o for o in objectives if o.covers(found)):
        since = [_ago(now, objective.period_s)]
        counted = store.runs.slo_counts(objective, since, **series_filters(row))[0]
        out.append(slo.budget(objective, counted))
    return tuple(out)


def standings(
    store: Store, objectives: tuple[slo.Objective, ...], keys: Iterable[str], now: datetime
) -> list[tuple[str, slo.Standing]]:
    """Per series of `keys` (series keys) probed within the longest period, and objective that
    covers it: the series' label and the standing now (the period's budget, each alert
    window's counts); by label, then objective."""
    keys = set(keys)
    if not objectives or not keys:
        return []
    out = []
    seen = store.runs.series_seen(_ago(now, max(o.period_s for o in objectives)))
    for row in seen.to_dict("records"):
        if any(row[c] is None for c in status.SERIES):  # an old row without a fidelity
            continue
        found = Series.of(row)
        if found.key not in keys:
            continue
        for objective in (o for o in objectives if o.covers(found)):
            spans = [objective.period_s, *slo.windows(objective)]
            counted = store.runs.slo_counts(
                objective, [_ago(now, s) for s in spans], **series_filters(row)
            )
            windows = dict(zip(spans[1:], counted[1:], strict=True))
            out.append((found.label, slo.standing(objective, counted[0], windows)))
    return sorted(out, key=lambda pair: (pair[0], pair[1].objective.name))


def table(rows: Sequence[tuple[str, slo.Standing]]) -> pd.DataFrame:
    """The Timeline's objectives table: per (series label, standing), the objective, its
    indicator and target, the period's events, bad and allowed bad, the budget left, each
    window's burn rate (``burn_1h``; blank without an event) and the pairs that fire (or can't
    tell)."""
    spans = sorted({w for _, s in rows for w in slo.windows(s.objective)})
    records = []
    for label, found in rows:
        spent = found.budget
        record: dict[str, Any] = {
            "series": label,
            "objective": found.objective.name,
            "indicator": found.objective.indicator,
            "target_rate": found.objective.target,
            "period": slo.span(found.objective.period_s),
            "events": spent.events,
            "bad": spent.bad,
            "allowed": spent.allowed,
            "budget_left_share": spent.remaining,
        }
        for w in spans:
            rate = found.burn(w) if w in slo.windows(found.objective) else None
            record[f"burn_{slo.span(w)}"] = math.nan if rate is None else rate
        record["alerting"] = ", ".join(
            p.label if v else f"{p.label} unknown" for p, v in found.pairs() if v is not False
        )
        records.append(record)
    columns = ["series", "objective", "indicator", "target_rate", "period", "events", "bad"]
    columns += ["allowed", "budget_left_share", *(f"burn_{slo.span(w)}" for w in spans), "alerting"]
    return pd.DataFrame(records, columns=columns)
