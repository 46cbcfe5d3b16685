"""Decomposition: where a rollout's time goes, phase by phase."""

import streamlit as st

from rtax.dashboard import data, figures, filters, style, summarized, tables

st.title("Decomposition")
chosen = filters.current()
db = data.database()
rows = data.summary(db, chosen.key)
if rows.empty:
    st.info(tables.EMPTY_HINT)
    st.stop()
means = summarized.phase_means(rows)
st.caption(
    "Bars are **means** of successful runs, stacked: means add up to the mean wall time, "
    "percentiles don't. Overhead is the harness's own time between phases. Hover for n and "
    "the substrate's native milestones."
)
milestones = summarized.milestones(rows)
st.plotly_chart(figures.decomposition(means, milestones), key="decomposition")
st.subheader("Per-phase percentiles")
style.table(summarized.phase_percentiles(rows), snapshot="decomposition-phases")
