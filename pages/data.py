"""Data: raw runs and actions for the current filters, aggregated tables, CSV downloads."""

from functools import partial

import streamlit as st

from rtax.dashboard import data, filters, style, summarized, tables

st.title("Data")
chosen = filters.current()
db = data.database()
key = chosen.key
n_runs, n_actions = data.counts(db, key)
st.caption(f"{n_runs:,} runs and {n_actions:,} actions for: {chosen.describe()}.")

st.subheader("Raw samples")
for column, table in zip(st.columns(2), ("runs", "actions"), strict=True):
    column.download_button(
        f"Download {table} (CSV)",
        partial(data.csv_of, db, key, table),  # made only when clicked
        file_name=style.snapshot_name(table),
        mime="text/csv",
        key=f"dl_{table}",
        on_click="ignore",
    )
st.write(f"Newest {tables.PREVIEW_ROWS:,} runs:")
style.table(data.recent(db, key, "runs", tables.PREVIEW_ROWS))
st.write(f"Newest {tables.PREVIEW_ROWS:,} actions:")
style.table(data.recent(db, key, "actions", tables.PREVIEW_ROWS))

st.subheader("Aggregated tables")
st.caption(
    "Computed from the per-series summaries of the window (docs/data.md#summaries): the "
    "pages' own tables, in their raw machine columns (internal names, full precision; the "
    "data dictionary below says what each means). Each page also offers a snapshot of the "
    "table in view under it."
)
rows = data.summary(db, key)
aggregates = {
    "overview": summarized.overview(rows),
    "cold_start": summarized.cold_start_all(rows),
    "phase_means": summarized.phase_means(rows),
    "phase_percentiles": summarized.phase_percentiles(rows),
    "trajectory_points": summarized.trajectory_points(rows),
    "trajectory_fits": summarized.fits(rows),
}
for name, frame in aggregates.items():
    st.download_button(
        f"Download {name} (CSV, {len(frame)} rows)",
        data.frame_csv(frame),
        file_name=style.snapshot_name(name.replace("_", "-")),
        mime="text/csv",
        key=f"dl_{name}",
        on_click="ignore",
    )

st.subheader("Data dictionary")
st.markdown(tables.DATA_DICTIONARY)
