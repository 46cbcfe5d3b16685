"""Cold start: per tier, the distribution of episode time per substrate, and the spread."""

import streamlit as st

from rtax.dashboard import data, figures, filters, style, tables
from rtax.substrates.base import FIDELITIES

st.title("Cold start")
chosen = filters.current()
runs = data.runs(data.database(), chosen.key)
st.caption(
    "Episode time of each tier's fixed script: from the create request to the end of its last "
    "action. Successful runs only; n in every legend and table. Spreads leave out series "
    "marked '(toolchain ≠ floor)' (they ran other programs) unless the sidebar lets them in."
)
log = st.toggle("Log axis", value=True, key="cold_start_log")
fixed = runs[runs["steps"] == 0] if not runs.empty else runs
if fixed.empty:
    st.info(tables.EMPTY_HINT)
for tier in sorted(fixed["tier"].unique()):
    tier_runs = fixed[fixed["tier"] == tier]
    table = tables.cold_start(tier_runs)
    st.subheader(f"{tier}")
    fidelities = [f for f in FIDELITIES if f in set(table["fidelity"])]
    for column, fidelity in zip(st.columns(max(len(fidelities), 1)), fidelities, strict=False):
        comparable = tables.cold_start(filters.for_comparison(tier_runs, chosen))
        ratio, fastest, slowest = tables.spread(comparable, fidelity)
        label = f"{tier} spread, {fidelity} series (p50 slowest / fastest)"
        if fastest is None:
            column.metric(label, "n/a", help="needs two series of this fidelity with data")
        else:
            column.metric(
                label,
                f"{ratio:,.1f}×",
                help=f"{slowest} vs {fastest}; the study reports up to 110× at T0",
            )
    left, right = st.columns(2)
    left.plotly_chart(
        figures.box(tier_runs, "episode_s", f"{tier}: episode time", log), key=f"box_{tier}"
    )
    right.plotly_chart(
        figures.ecdf(tier_runs, "episode_s", f"{tier}: ECDF", log), key=f"ecdf_{tier}"
    )
    style.table(table)
