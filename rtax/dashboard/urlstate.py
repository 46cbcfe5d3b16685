"""The view in the URL: every filter and input a page draws is bound to a query parameter, so a
link reproduces the view (docs/dashboard.md#links).

Why Streamlit's own binding (`bind="query-params"`): it seeds a widget from the URL on load,
keeps the URL up to date as the widget moves, drops a value equal to the widget's default and
ignores one that is no longer an option, and keeps the entrypoint's (the sidebar's) parameters
across page changes while a page's own leave with it. A page adopts it by giving each widget
``**urlstate.bound("<key>")``; the key is the parameter's name. A bound selectbox's URL value is
its option's label, so a label carries no changing figure (an `n` goes in the caption instead).
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlencode

import streamlit as st

BIND = "query-params"


def bound(key: str) -> dict[str, Any]:
    """A widget's keyword arguments that put its value in the URL under `key`."""
    return {"key": key, "bind": BIND}


def query() -> list[tuple[str, str]]:
    """The URL's parameters as they are now (repeated keys repeated: a multiselect's values)."""
    params = st.query_params
    return [(k, v) for k in params for v in params.get_all(k)]


def link(url_path: str = "") -> str:
    """The link to this view: the page's address as the browser reaches it (behind a proxy,
    the proxy's), else this server's relative path, with the current parameters."""
    base = st.context.url or f"/{url_path}"
    found = query()
    return f"{base}?{urlencode(found)}" if found else base
