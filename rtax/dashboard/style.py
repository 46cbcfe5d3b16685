"""How the pages draw a table: the one formatting rule (`rtax.dashboard.format`) over the raw
frame, and a CSV snapshot of it beside.

Why the raw frame stays underneath where it can (docs/dashboard.md#formatting): a pandas Styler
gives every cell its display string while the values stay numbers, so a click on a header still
sorts by number; and the snapshot, like every download, keeps the raw machine columns (internal
names, full precision) whatever the display. A page adopts it with
`style.table(frame, snapshot="<page>-<table>")`.
"""

from __future__ import annotations

from functools import partial

import pandas as pd
import streamlit as st

from rtax.dashboard import filters, format

#: Above this many cells a table is formatted to text instead of styled: pandas' Styler costs
#: ~7 µs a cell, so the Data page's 1,000-row previews would take most of its render budget.
STYLER_CELLS = 5_000


def column_config(columns) -> dict:
    """Per column: its human header, and its machine name (the CSV's) on hover."""
    return {
        c: st.column_config.Column(format.header(c), help=f"`{c}` in CSV downloads")
        for c in columns
    }


def styled(frame: pd.DataFrame) -> pd.io.formats.style.Styler | pd.DataFrame:
    """`frame` in display order, each cell given its display string: a Styler over the raw
    values, except in a column with an unknown value, which holds its display strings (the
    grid draws a missing value as "None" whatever its display string, and a blank is asked
    for); above `STYLER_CELLS`, the display strings throughout."""
    shown = frame[format.ordered(list(frame.columns))].reset_index(drop=True)
    write = format.formatters(shown)
    holes = [c for c in shown.columns if shown.size > STYLER_CELLS or shown[c].isna().any()]
    if holes:
        shown = shown.assign(**{c: format.column(c, shown[c]) for c in holes})
    if shown.size > STYLER_CELLS:
        return shown
    return shown.style.format({c: f for c, f in write.items() if c not in holes})


def snapshot_name(name: str) -> str:
    """The snapshot's file name: the page's table and the sidebar's filters."""
    return format.file_name(name, filters.chosen().parts())


def table(frame: pd.DataFrame, *, snapshot: str | None = None, **kwargs) -> None:
    """A formatted, index-free table; with `snapshot`, a download of it (raw columns, as CSV)
    below, its name saying which table and which filters."""
    st.dataframe(
        styled(frame), hide_index=True, column_config=column_config(frame.columns), **kwargs
    )
    if snapshot is not None:
        download(frame, snapshot)


def _csv(frame: pd.DataFrame) -> bytes:
    return frame.to_csv(index=False).encode()


def download(frame: pd.DataFrame, snapshot: str, label: str = "Download this table") -> None:
    """A CSV snapshot of `frame` (raw columns, full precision), named by `snapshot_name`;
    nothing for an empty frame."""
    if frame.empty:
        return
    st.download_button(
        f"{label} (CSV)",
        partial(_csv, frame),  # made only when clicked: a page never pays for it
        file_name=snapshot_name(snapshot),
        mime="text/csv",
        key=f"snapshot_{snapshot}",
        on_click="ignore",
        type="tertiary",
        icon=":material/download:",
    )
