"""Capacity: load runs, time to first command against concurrency, the envelope, the client."""

import streamlit as st

from rtax.analysis import envelope
from rtax.dashboard import capacity, data, filters, style

st.title("Capacity")
chosen = filters.current()
db = data.database()
loads = data.load_runs(db, chosen.key)
rollouts = data.load_rollouts(db, tuple(loads["load_id"]))
bounds = data.capacity_bounds()
points = envelope.points(loads, rollouts)
fitted = envelope.fit(points, bounds)

st.caption(
    "Load runs (`rtax burst`): sequential, staggered or burst rollouts of one tier on one "
    "substrate. Time to first command is over successful rollouts, with n; failure rates leave "
    "rtax's own harness errors out. Only complete load runs enter the envelope. "
    "See docs/load.md."
)
if loads.empty:
    st.info(
        "No load runs in this window yet: run `rtax burst --substrate docker -n 20`, a "
        "`--shape sequential` baseline and a `--shape staggered --every 250ms` ramp, or the "
        "shipped `rtax burst --load docker-burst-20`."
    )
    st.stop()

st.subheader("Envelope")
limit = "" if bounds.ttfc_p95_max_s is None else f"{bounds.ttfc_p95_max_s:g} s or "
st.caption(
    f"A series breaks where TTFC p95 exceeds {limit}{bounds.ttfc_p95_ratio_max:g}× its p95 "
    f"at the lowest concurrency measured, or more than {bounds.failure_rate_max:.0%} of "
    "rollouts fail ([capacity] in the configuration). Held: the largest value measured below "
    "the first break, by concurrency and, apart, by achieved creates/s."
)
table = capacity.labelled(fitted)
for row in table.to_dict("records"):
    held, broke = row["held_concurrency"], row["break_concurrency"]
    verdict = f"breaks at {broke:g}" if broke == broke else "no break measured"
    st.metric(
        f"{row['series']}: concurrency held",
        "none" if held != held else f"{held:g}",
        verdict,
        delta_color="red" if broke == broke else "gray",
        delta_arrow="off",
        help=row["broken_by"] or None,
    )
style.table(
    table[["series", *[c for c in envelope.ENVELOPE_COLUMNS if c not in envelope.SERIES]]],
    snapshot="capacity-envelope",
)
saturated = [r for r in table.to_dict("records") if r["saturated"]]
for row in saturated:
    st.warning(
        f"{row['series']}: the client was saturated in some load runs ({row['saturated']}): "
        "their figures may be rtax's limit, not the substrate's."
    )

st.plotly_chart(capacity.ttfc_against_concurrency(points, fitted), key="capacity_ttfc")
style.table(capacity.labelled(points) if not points.empty else points, snapshot="capacity-points")

st.subheader("Launch-order profile")
listed = capacity.load_table(loads, points)
names = capacity.run_names(listed)
picked = st.selectbox("Load run", list(names), format_func=names.get, key="capacity_run")
st.plotly_chart(
    capacity.launch_profile(
        rollouts[rollouts["load_id"] == picked], f"TTFC by launch order: {names[picked]}"
    ),
    key="capacity_profile",
)

st.subheader("Load runs and the client")
st.caption(
    "harness_cpu_cores: the harness's CPU seconds per second over the run (its threads share "
    f"one interpreter lock: about one core is all they get; {envelope.SATURATED_CPU_CORES:g} "
    "or more counts as saturated). Dispatch lag: a rollout's create request minus the moment "
    f"its launch was due (a median above {envelope.SATURATED_LAG_SHARE:.0%} of the TTFC p50 "
    "counts as saturated)."
)
style.table(listed)
