"""The Overview's status board: a card per series (`rtax.analysis.status.Card`), read from the
store and drawn as Streamlit containers with an inline SVG sparkline.

Why plain containers and SVG (docs/dashboard.md#status-board): dozens of cards must paint in
milliseconds, and a card is read at a glance: state first (coloured, with why), then the last
probe's age and the day's figures, each percentile with its `n`, in the dashboard's one
format (`rtax.dashboard.format`). Why it reads through the runs index, a series at a time: a
card needs its newest runs, never the week's, so a board costs the same however long the
history (`read`, behind `rtax.dashboard.data.status_board`'s cache).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any

import pandas as pd
import streamlit as st

from rtax.analysis import slo, stats, status, summaries
from rtax.analysis.incidents import stamp
from rtax.dashboard import objectives
from rtax.dashboard.format import TOO_FEW, age, duration, rate
from rtax.store import Store

#: Streamlit's colour names for each state's badge: unknown is grey (no evidence either way),
#: stale violet (evidence that has aged), so the two read apart at a glance.
COLORS = {"down": "red", "degraded": "orange", "unknown": "gray", "stale": "violet", "up": "green"}
#: Cards per row.
PER_ROW = 4
#: Series not probed for this long leave the status board (as they leave detection).
LOOKBACK = timedelta(seconds=status.LOOKBACK_S)
#: The newest rollouts per series a card's sparkline draws (within the last day).
SPARK_POINTS = 96


def read(
    store: Store, filters: Mapping[str, Any], configuration: Any, now: datetime
) -> list[status.Card]:
    """The cards of the series of `filters` (the store's run filters) probed within `LOOKBACK`,
    judged by `configuration`'s ``[status]`` rules, plans and objectives (the defaults and none
    without one): the series list and the day's figures from the summaries, each card's newest
    runs (and, only when those all failed for rtax's own reasons, its last that reached the
    substrate) through the runs index."""
    rules = configuration.status if configuration is not None else status.StatusRules()
    plans = configuration.plans if configuration is not None else ()
    goals = configuration.slos if configuration is not None else ()
    series = list(status.SERIES)
    week = store.summaries.read(metrics=["wall_s"], since=stamp(now - LOOKBACK), **filters)
    if week.empty:
        return []
    seen = (
        week.assign(steps=week["steps"].astype(int))
        .groupby(series, as_index=False, dropna=False)["last_started_at"]
        .max()
        .rename(columns={"last_started_at": "last"})
    )
    day_rows = store.summaries.read(
        metrics=["time_to_first_command_s"], since=stamp(now - timedelta(days=1)), **filters
    )
    day = summaries.combine(day_rows, [*series, "metric"])
    if not day.empty:
        day["runs"] = day["attempts"]
        day["p50"] = [s.quantile(50) for s in day["sketch"]]
        day["p95"] = [s.quantile(95) for s in day["sketch"]]
        day["p99"] = [stats.reported(99, s.n, s.quantile(99)) for s in day["sketch"]]

    def wanted(row: Any) -> dict[str, Any]:
        return {c: row[c] for c in series} | {"steps": int(row["steps"])}

    def recent(row: Any) -> pd.DataFrame:
        limit = max(rules.samples, SPARK_POINTS)
        return store.runs.read(
            columns=status.COLUMNS, limit=limit, newest_first=True, **wanted(row)
        )

    def budgets(row: Any) -> tuple[slo.Budget, ...]:
        return objectives.budgets(store, goals, row, now)

    def reached(row: Any) -> str | None:
        return store.runs.last_reached(since=stamp(now - LOOKBACK), **wanted(row))

    incidents = store.incidents.open()
    return status.cards(seen, day, recent, incidents, plans, rules, now, budgets, reached)


def summary(cards: Sequence[status.Card]) -> str:
    """One line: how many series are in each state, worst first."""
    counts = {s: sum(1 for c in cards if c.state == s) for s in status.STATES}
    parts = [f":{COLORS[s]}[{counts[s]} {s}]" for s in status.STATES if counts[s]]
    return f"{len(cards)} series: " + ", ".join(parts)


def figures(card: status.Card) -> str:
    """The card's figures as one markdown block."""
    if card.runs_24h:
        success = f"success {rate(card.success_24h)} of {card.runs_24h} (24 h)"
    else:
        success = "no rollout reached the substrate in 24 h"
    if card.own_24h:
        success += f"; {card.own_24h:,} failed for rtax's own reasons"
    if card.ttfc_n:
        p99 = TOO_FEW if card.ttfc_p99_s is None else duration(card.ttfc_p99_s)
        ttfc = (
            f"first command p50 {duration(card.ttfc_p50_s)} · p95 "
            f"{duration(card.ttfc_p95_s)} · p99 {p99} (n={card.ttfc_n})"
        )
    else:
        ttfc = "first command: no successful rollout in 24 h"
    lines = [f"last probe {age(card.last_age_s)}", success, ttfc, *map(budget, card.budgets)]
    return "  \n".join(lines)


def budget(spent: slo.Budget) -> str:
    """One objective's error budget on a card: the share left (red once overspent), its name,
    and the bad events of its period (docs/alerts.md#objectives-slos)."""
    period = slo.span(spent.period_s)
    if spent.remaining is None:
        return f"error budget {spent.objective}: no rollout in {period}"
    left = f"error budget left {rate(spent.remaining)}"
    if spent.remaining < 0:
        left = f":red[{left}]"
    return f"{left} · {spent.objective} ({spent.bad} of {spent.events} bad in {period})"


def draw(cards: Sequence[status.Card]) -> None:
    """The board: `PER_ROW` cards a row, the worst states first (`status.STATES`)."""
    st.markdown(summary(cards))
    for start in range(0, len(cards), PER_ROW):
        columns = st.columns(PER_ROW)
        for column, card in zip(columns, cards[start : start + PER_ROW], strict=False):
            with column.container(border=True):
                color = COLORS[card.state]
                st.markdown(f"**{card.label}**  \n:{color}[● **{card.state}**]")
                if card.reasons:
                    st.caption("; ".join(card.reasons))
                st.markdown(figures(card))
                st.markdown(status.sparkline(card.spark), unsafe_allow_html=True)
