"""The objectives' figures the dashboard shows: each card's error budgets and the Timeline's
standings, read through the runs index (`rtax.store.runs.Runs.slo_counts`).

Why a module of its own (docs/alerts.md#objectives-slos): the status board and the Timeline
count the same SLI events the same way, one indexed read per objective and series (the
period and every alert window at once), and `rtax.dashboard.data` keeps only the cached
readers that open the store and call these.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import datetime, timedelta
from typing import Any

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
