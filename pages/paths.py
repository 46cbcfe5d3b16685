"""Paths: the four ways to a ready environment side by side (docs/measurement.md#launch-paths)."""

import streamlit as st

from rtax.dashboard import data, filters, style, summarized, tables

st.title("Paths")
chosen = filters.current()
db = data.database()
rows = data.summary(db, chosen.key, ("time_to_first_command_s", "episode_s"))
st.caption(
    "Per substrate, each launch path: cold (made), warm (claimed from a pool of running ones), "
    "restore (a fresh environment from a snapshot taken after set-up) and resume (thawed from a "
    "pool of paused ones). Time to first command (T0) ends at the first command that ran on "
    "every path; the T2 episode runs from the launch request to the last action. Successful "
    "runs only, p50 and p95 with n. Held while idle: the memory a pooled environment held "
    "as it waited (warm: running; resume: frozen), measured once per environment after it was "
    "made; the restore path's ready snapshots on disk."
)
snapshots = data.snapshots(db)
table = summarized.paths(rows, data.idle_memory(db, chosen.key), snapshots)
if table.empty:
    st.info(tables.EMPTY_HINT)
else:
    style.table(table, snapshot="paths")
st.subheader("Snapshots")
st.caption(
    "What the restore path holds while idle: one snapshot per substrate and tier on disk "
    "(its size), and how long making it took (set-up, warm-up, the checkpoint)."
)
if snapshots.empty:
    st.info('No snapshot made yet: a substrate with launch = "restore" makes one per tier.')
else:
    style.table(
        snapshots[
            [
                "substrate",
                "tier",
                "made_at",
                "state",
                "setup_s",
                "warmup_s",
                "snapshot_s",
                "size_bytes",
            ]
        ],
        snapshot="snapshots",
    )
