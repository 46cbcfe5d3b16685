"""The footer under every page: which database, how old its newest data is, which rtax, and a
link to the view as it is now (docs/dashboard.md#links).

Why at the foot: the link is built from the URL's parameters once the page has drawn (and so
bound, `rtax.dashboard.urlstate`) all of its inputs; `app.py` draws it after the page ran.
"""

from __future__ import annotations

from datetime import UTC, datetime

import pandas as pd
import streamlit as st

from rtax.core.version import __version__
from rtax.dashboard import data, format, urlstate


def line(db: str, newest: str | None, now: datetime, version: str) -> str:
    """The footer's line: the database, the newest run's start and age, the rtax version."""
    if newest is None:
        fresh = "no runs yet"
    else:
        started = pd.Timestamp(newest)
        age = (pd.Timestamp(now) - started).total_seconds()
        fresh = f"newest run {format.stamp(started)} ({format.age(max(age, 0.0))})"
    return f"Database `{db}` · {fresh} · rtax {version}"


@st.fragment(run_every=data.TTL_S)
def _freshness(db: str) -> None:
    """The footer's line, refreshed like the live parts of the pages: the data's age moves."""
    st.caption(line(db, data.newest_run(db), datetime.now(UTC), __version__))


def draw(url_path: str = "") -> None:
    """The footer of the page at `url_path`."""
    st.divider()
    _freshness(data.database())
    st.caption("Link to this view (the button at its right copies it):")
    st.code(urlstate.link(url_path), language=None, wrap_lines=True)
