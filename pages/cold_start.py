"""Cold start: per tier, the distribution of episode time per substrate, and the spread."""

import streamlit as st

from rtax.dashboard import data, figures, filters, format, style, summarized, tables, urlstate
from rtax.substrates.base import FIDELITIES

st.title("Cold start")
chosen = filters.current()
db = data.database()
rows = data.summary(db, chosen.key, ("episode_s",))
sample = data.newest_runs(db, chosen.key)
st.caption(
    "Episode time of each tier's fixed script: from the create request to the end of its last "
    "action. Successful runs only; n in every legend and table. Spreads leave out series "
    "marked '(toolchain ≠ floor)' (they ran other programs) unless the sidebar lets them in. "
    "Tables cover the whole window (from per-series summaries); the box plots and ECDFs draw "
    f"the raw samples of the newest {data.DISTRIBUTION_ROWS:,} runs of the window."
)
log = st.toggle("Log axis", value=True, **urlstate.bound("cold_start_log"))
fixed = rows[rows["steps"] == 0] if not rows.empty else rows
if fixed.empty:
    st.info(tables.EMPTY_HINT)
for tier in sorted(fixed["tier"].unique()):
    tier_rows = fixed[fixed["tier"] == tier]
    tier_runs = sample[(sample["tier"] == tier) & (sample["steps"] == 0)]
    table = summarized.cold_start(tier_rows)
    st.subheader(f"{tier}")
    fidelities = [f for f in FIDELITIES if f in set(table["fidelity"])]
    for column, fidelity in zip(st.columns(max(len(fidelities), 1)), fidelities, strict=False):
        comparable = summarized.cold_start(filters.for_comparison(tier_rows, chosen))
        ratio, fastest, slowest = tables.spread(comparable, fidelity)
        label = f"{tier} spread, {fidelity} series (p50 slowest / fastest)"
        if fastest is None:
            column.metric(label, "n/a", help="needs two series of this fidelity with data")
        else:
            column.metric(
                label,
                format.ratio(ratio),
                help=f"{slowest} vs {fastest}; the study reports up to 110× at T0",
            )
    left, right = st.columns(2)
    left.plotly_chart(
        figures.box(tier_runs, "episode_s", f"{tier}: episode time", log), key=f"box_{tier}"
    )
    right.plotly_chart(
        figures.ecdf(tier_runs, "episode_s", f"{tier}: ECDF", log), key=f"ecdf_{tier}"
    )
    style.table(table, snapshot=f"cold-start-{tier}")
