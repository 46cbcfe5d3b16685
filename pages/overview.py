"""Overview: per substrate x tier, time-to-first-command and episode percentiles, live."""

import streamlit as st

from rtax.dashboard import data, filters, style, tables

st.title("Overview")
chosen = filters.current()
db = data.database()


@st.fragment(run_every=data.TTL_S)
def live() -> None:
    runs = data.runs(db, chosen.key)
    if runs.empty:
        st.info(tables.EMPTY_HINT)
        return
    ok = int((runs["status"] == "ok").sum())
    st.caption(
        f"{len(runs)} runs ({ok} successful) for: {chosen.describe()}. Percentiles are over "
        f"successful runs only, with their n; the success rate counts every run. "
        f"Refreshes every {data.TTL_S} s."
    )
    style.table(tables.overview(runs))


live()
