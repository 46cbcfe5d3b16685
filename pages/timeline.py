"""Timeline: p50, p95 and success rate over time per series (by default the few that need
attention), with failures, change points, incidents through their lifecycle and maintenance
windows drawn on the chart; below, the error budget and burn rates of each objective."""

from datetime import UTC, datetime

import pandas as pd
import streamlit as st

from rtax.analysis import overlays, timeline
from rtax.dashboard import data, figures, filters, objectives, style, tables, urlstate

st.title("Timeline")
chosen = filters.current()
db = data.database()
span = data.timeline_span(db, chosen.key)
if span is None:
    st.info(tables.EMPTY_HINT)
    st.stop()

left, middle, right = st.columns([2, 1, 3])
metric = left.selectbox("Metric", list(timeline.METRICS), **urlstate.bound("t_metric"))
buckets = list(timeline.BUCKETS)
bucket = middle.selectbox(
    "Bucket",
    buckets,
    index=buckets.index(timeline.default_bucket(span)),
    help="5 min reads the raw samples of the last 7 days and goes on with hourly summaries "
    "before them; 1 h and 1 d read the summaries, raw and folded history alike.",
    **urlstate.bound("t_bucket"),
)
column = timeline.METRICS[metric]
known = data.timeline_series(db, chosen.key)  # key -> Series, in label order
ranking = timeline.ranked(known, data.status_board(db, chosen.key), data.incident_list(db))
default = timeline.default_series(ranking)
picked = right.multiselect(
    "Series",
    list(known),
    default=default,
    format_func=lambda key: known[key].label,
    placeholder="choose series",
    **urlstate.bound("t_series"),
)
st.caption(timeline.selection_note(ranking, default, known))


@st.fragment(run_every=data.TTL_S)
def chart() -> None:
    shown = data.timeline_points(db, chosen.key, column, bucket, tuple(picked))
    if shown.empty:
        st.info("No points for these series in the window.")
        return
    keys = dict(zip(shown["key"], shown["series"], strict=False))
    now = pd.Timestamp(datetime.now(UTC))
    axis = timeline.x_range(shown, filters.WINDOWS[chosen.window], timeline.BUCKETS[bucket], now)
    incidents = data.incident_list(db)
    spans = overlays.spans(incidents, keys, now)
    drawn = {key: known[key] for key in keys if key in known}
    bands = overlays.bands(data.maintenance_windows(db), drawn, *axis)
    drawing = figures.timeline(
        shown, overlays.placed(spans, axis), metric, overlays.placed(bands, axis), axis
    )
    st.plotly_chart(drawing, width="stretch")
    sources = ", ".join(sorted(shown["source"].unique()))
    st.caption(
        f"{int(shown['runs'].sum())} rollouts in {len(shown)} points of {bucket} "
        f"({sources}) for: {chosen.describe()}. Solid: p50, dashed: p95, over successful "
        "rollouts (hover for n and the bucket); below, the success rate of every rollout the "
        "substrate answers for (rtax's own harness errors left out), failed buckets marked x. "
        "Shaded: incidents from their change point (dotted) to their end, red while open, "
        "orange once acknowledged, grey once resolved; violet up to a solid line where the new "
        "level was accepted as the new baseline. Pale blue bands: maintenance windows over "
        "the series shown (alerts silenced, incidents kept). The axis spans the window."
    )
    style.download(shown, f"timeline-{metric}-{bucket}", "Download these points")
    if spans:
        st.subheader("Incidents")
        style.table(overlays.incident_table(spans, incidents), snapshot="timeline-incidents")


chart()


@st.fragment(run_every=data.TTL_S)
def budgets() -> None:
    standings = data.slo_standings(db, tuple(picked))
    if not standings:
        return
    shown = objectives.table(standings)
    st.subheader("Objectives")
    st.plotly_chart(figures.budgets(shown), width="stretch")
    style.table(shown, snapshot="timeline-objectives")
    st.caption(
        "Each [[slos]] objective that covers a series shown, with the series' own error budget "
        "over the objective's period: bad events so far against (1 - target) x events, and "
        "the share left (negative: overspent). Burn rate: the bad share of a window ending now "
        "over 1 - target (1x spends the budget exactly over the period; blank: no rollout in "
        "the window). A pair fires when both its windows burn at or above its factor, and "
        "is unknown when a window holds no rollout to tell (docs/alerts.md#objectives-slos)."
    )


budgets()
