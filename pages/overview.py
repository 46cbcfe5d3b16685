"""Overview: the status board (a card per series), then per substrate x tier the
time-to-first-command and episode percentiles, live."""

import streamlit as st

from rtax.analysis.sketch import EXACT_LIMIT
from rtax.dashboard import board, data, filters, style, summarized, tables

st.title("Overview")
chosen = filters.current()
db = data.database()


@st.fragment(run_every=data.TTL_S)
def status_board() -> None:
    cards = data.status_board(db, chosen.key)
    if not cards:
        return
    st.subheader("Status")
    board.draw(cards)
    st.caption(
        "A card per series probed in the last 7 days (the sidebar's substrates, tiers, vantages "
        "and fidelity; not its window: the board is about now), worst first: down, degraded, "
        "unknown (probed, but its newest rollouts failed for rtax's own reasons and never "
        "reached the substrate: no evidence either way), stale (not probed within its limit), "
        "up. A state is judged on the newest rollouts that reached the substrate and the open "
        "incidents, by the [status] rules (docs/alerts.md#status); its figures are the last 24 "
        "hours', percentiles over successful rollouts with their n; the sparkline draws the "
        "time to first command of the newest rollouts that reached the substrate (log scale), "
        "failures as red ticks."
    )


@st.fragment(run_every=data.TTL_S)
def live() -> None:
    rows = data.summary(db, chosen.key, summarized.OVERVIEW_METRICS)
    if rows.empty:
        st.info(tables.EMPTY_HINT)
        return
    runs, ok = summarized.totals(rows)
    st.caption(
        f"{runs} runs ({ok} successful) for: {chosen.describe()}. Percentiles are "
        f"over successful runs only, with their n; the success rate counts every run "
        f"the substrate answers for: harness errors (rtax's own failures) are counted "
        f"apart and never lower it. A `res` column gives the polling resolution (the "
        f"coarsest poll interval at which a sample's events were seen) wherever it exceeds "
        f"5 % of the p50 beside it; blank: finer, or nothing polled. "
        f"Refreshes every {data.TTL_S} s."
    )
    style.table(summarized.overview(rows), snapshot="overview")
    note = tables.fidelity_note(rows["fidelity"].dropna())
    if note:
        st.caption(note)
    seen = summarized.vantages(rows)
    if not seen.empty:
        st.subheader("From each vantage")
        st.caption(
            "The same substrate probed from several places (Ray nodes labelled with a "
            "vantage, docs/ray.md): two vantages are two series, never merged. "
            "`ttfc_vs_nearest`: this vantage's time-to-first-command p50 over the nearest one's."
        )
        style.table(seen)
    st.caption(
        "Read from per-series hourly summaries kept as data arrives (docs/data.md#summaries), "
        "with the same percentile rule as raw samples (linear interpolation): exactly the raw "
        f"answer up to {EXACT_LIMIT} samples per row, within 1% beyond."
        + (
            " Includes rolled-up history: raw samples past the retention age folded into "
            "rollups (docs/configuration.md#retention), counted by the hour they started in."
            if data.has_rollups(db, chosen.key)
            else ""
        )
    )


@st.fragment(run_every=data.TTL_S)
def spend() -> None:
    table = data.spend_today(db)
    if table.empty:
        return
    st.subheader("Spent today (UTC)")
    st.caption(
        "Rollouts started and environment-minutes used (create request to verified deletion) "
        "since midnight UTC, per substrate, beside the daily budgets in the configuration. The "
        "scheduler checks the same figures before every rollout and pauses a substrate whose "
        "budget is used up (docs/configuration.md#budgets). Emulated and modelled substrates "
        "cost nothing but are counted the same way."
    )
    style.table(table, snapshot="overview-spend")


status_board()
live()
spend()
