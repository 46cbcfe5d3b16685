"""How the pages format numbers: seconds with four decimals, rates as percentages.

Why one place: the same column means the same thing on every page, so it looks the same too.
"""

import streamlit as st

_SECONDS = st.column_config.NumberColumn(format="%.4f s")
_RATE = st.column_config.NumberColumn(format="percent")
_HOURS = st.column_config.NumberColumn(format="%.1f h")
_PER_SECOND = st.column_config.NumberColumn(format="%.2f /s")


def column_config(columns) -> dict:
    """Formatting for the columns present (seconds, rates, hours, per second), keyed by column
    name."""
    config = {}
    for name in columns:
        if name in ("success_rate", "failure_rate", "failure_rate_max"):
            config[name] = _RATE
        elif name.endswith("_per_s"):
            config[name] = _PER_SECOND
        elif name.endswith("hours"):
            config[name] = _HOURS
        elif name.endswith("_s") or name in ("p50", "p95", "p99", "mean", "seconds"):
            config[name] = _SECONDS
    return config


def table(frame, **kwargs) -> None:
    """A formatted, index-free table."""
    st.dataframe(frame, hide_index=True, column_config=column_config(frame.columns), **kwargs)
