"""Decomposition: where a rollout's time goes, phase by phase."""

import streamlit as st

from rtax import stats
from rtax.dashboard import data, figures, filters, style, tables

st.title("Decomposition")
chosen = filters.current()
db = data.database()
runs = data.runs(db, chosen.key)
if runs.empty:
    st.info(tables.EMPTY_HINT)
    st.stop()
means = stats.phase_means(runs, by=("series", "workload"))
st.caption(
    "Bars are **means** of successful runs, stacked: means add up to the mean wall time, "
    "percentiles don't. Overhead is the harness's own time between phases. Hover for n and "
    "the substrate's native milestones."
)
st.plotly_chart(figures.decomposition(means, data.milestones(db, chosen.key)), key="decomposition")
st.subheader("Per-phase percentiles")
style.table(tables.phase_percentiles(runs))
