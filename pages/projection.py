"""Projection: worker-hours, extra hours, spread, wall-clock time and cost for a fleet plan."""

import math

import streamlit as st

from rtax import projection, reference
from rtax.dashboard import data, figures, filters, style, summarized, tables
from rtax.substrates.base import FIDELITIES

st.title("Projection")
chosen = filters.current()
rows = data.summary(data.database(), chosen.key, ("episode_s",))
rows = filters.for_comparison(rows, chosen)

st.caption(
    "Only series that ran the local floor's workload toolchain are projected (series marked "
    "'(toolchain ≠ floor)' timed other programs); the sidebar can let them in."
)
a, b, c, d = st.columns(4)
trajectories = a.number_input(
    "Trajectories", min_value=1, value=1_000_000, step=10_000, key="proj_trajectories"
)
steps = b.number_input("Actions per trajectory", min_value=1, value=150, step=10, key="proj_steps")
workers = c.number_input("Parallel workers", min_value=1, value=1_000, step=100, key="proj_workers")
which = d.segmented_control(
    "Seconds per trajectory",
    list(projection.STATISTICS),
    default=projection.TOTAL,
    format_func=lambda s: "mean (total)" if s == projection.TOTAL else f"what-if {s}",
    key="proj_stat",
    required=True,
    help="; ".join(f"{k}: {v}" for k, v in projection.LABELS.items()),
)
if which == projection.TOTAL:
    st.caption(
        "Worker-hours and costs are totals: N trajectories take N × mean seconds (the sum of "
        "their times). N × p50 would under-state a right-skewed distribution such as cold "
        "starts; p50 and p95 are offered as what-ifs only (docs/measurement.md#statistics)."
    )
else:
    st.warning(
        f"What-if: {projection.LABELS[which]}. These hours are not the expected total, which "
        "is N × mean (choose “mean (total)”)."
    )

found, lacking = summarized.estimates(rows, int(steps), which)
if found:
    with st.expander("Price per worker-hour (optional)"):
        prices = {
            name: st.number_input(
                f"{name} ($/h)", min_value=0.0, value=0.0, step=0.01, key=f"price_{name}"
            )
            for name in found
        }
    prices = {k: v for k, v in prices.items() if v > 0}
    fidelity_of = rows.drop_duplicates("series").set_index("series")["fidelity"].to_dict()
    # One table per fidelity: extra hours and spreads across real and emulated series would
    # compare a measurement with an emulation.
    for fidelity in FIDELITIES:
        names = [k for k in found if fidelity_of.get(k) == fidelity]
        if not names:
            continue
        table = projection.project(
            {k: found[k].seconds for k in names},
            trajectories=int(trajectories),
            workers=int(workers),
            prices=prices,
        )
        table["basis"] = [found[s].basis for s in table["substrate"]]
        table["n"] = [found[s].n for s in table["substrate"]]
        st.subheader(f"{fidelity.capitalize()} series")
        ratio = projection.spread(table["worker_hours"])
        m1, m2 = st.columns(2)
        m1.metric(
            f"Spread, {fidelity} (max / min worker-hours)",
            "n/a" if math.isnan(ratio) else f"{ratio:,.2f}×",
        )
        m2.metric(
            f"Extra hours of the slowest over the best, {fidelity}",
            f"{table['extra_hours'].max():,.0f} h",
        )
        st.plotly_chart(
            figures.projection_bars(
                table,
                f"{int(trajectories):,} trajectories × {int(steps)} actions "
                f"({projection.LABELS[which]}, {fidelity})",
            ),
            key=f"proj_bars_{fidelity}",
        )
        style.table(table)
else:
    st.info(
        "No substrate has trajectory data for a projection yet: run "
        "`rtax probe --tier T2 --steps 10`, `--steps 50` and `--steps 150`."
    )
if lacking:
    st.warning("Lacking data: " + "; ".join(f"**{k}**: {v}" for k, v in lacking.items()))

st.subheader("Scenarios: the study, reproduced from its inputs")
style.table(tables.scenarios())
st.caption(
    "Headlines quoted (inputs unpublished, not recomputed): "
    + "; ".join(reference.HEADLINES)
    + f". Source: {reference.SOURCE}."
)
