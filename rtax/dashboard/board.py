"""The Overview's status board: a card per series (`rtax.analysis.status.Card`), drawn as Streamlit
containers with an inline SVG sparkline.

Why plain containers and SVG (docs/dashboard.md#status-board): dozens of cards must paint in
milliseconds, and a card is read at a glance: state first (coloured, with why), then the last
probe's age and the day's figures, each percentile with its `n`, in the dashboard's one
format (`rtax.dashboard.format`).
"""

from __future__ import annotations

from collections.abc import Sequence

import streamlit as st

from rtax.analysis import slo, status
from rtax.dashboard.format import age, duration, rate

#: Streamlit's colour names for each state's badge: unknown is grey (no evidence either way),
#: stale violet (evidence that has aged), so the two read apart at a glance.
COLORS = {"down": "red", "degraded": "orange", "unknown": "gray", "stale": "violet", "up": "green"}
#: Cards per row.
PER_ROW = 4


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
        ttfc = (
            f"first command p50 {duration(card.ttfc_p50_s)} · p95 "
            f"{duration(card.ttfc_p95_s)} (n={card.ttfc_n})"
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
