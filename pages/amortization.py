"""Amortization: trajectory time and per-action latency against the number of actions."""

import streamlit as st

from rtax.dashboard import data, figures, filters, style, summarized, tables, urlstate
from rtax.planning import projection

st.title("Amortization")
chosen = filters.current()
rows = data.summary(data.database(), chosen.key, ("episode_s",))
left, right = st.columns(2)
which = left.segmented_control(
    "Statistic of the points",
    list(projection.STATISTICS),
    default=projection.TOTAL,
    required=True,
    help="The mean by default: the fitted lines (least squares over every run) follow it, and "
    "so do totals (N × mean). p50/p95 points show the typical and the slow trajectory.",
    **urlstate.bound("amort_stat"),
)
overlay = right.toggle(
    "Published reference points",
    value=True,
    help="50-action trajectory times from the study's companion write-up",
    **urlstate.bound("amort_overlay"),
)
points = summarized.trajectory_points(rows, which)
fit_table = summarized.fits(rows)
if points.empty:
    st.info(
        "No trajectory runs yet: run `rtax probe --tier T2 --steps 10` (and 50, 150) "
        "to see amortization."
    )
time_fig, per_fig = figures.amortization(points, fit_table, overlay, which)
a, b = st.columns(2)
a.plotly_chart(time_fig, key="amort_time")
b.plotly_chart(per_fig, key="amort_per_action")
st.subheader("Fitted lines T(S) = fixed + S × per_action")
st.caption("Least squares over every successful trajectory run (so the line follows the mean).")
style.table(fit_table, snapshot="amortization-fits")
st.subheader("Crossover points")
cross = tables.crossovers(fit_table)
if cross.empty:
    st.write(
        "No crossovers: one line stays below the other for every S > 0, or fewer than "
        "two series have fits."
    )
else:
    style.table(cross, snapshot="amortization-crossovers")
st.subheader("Points")
style.table(points, snapshot="amortization-points")
