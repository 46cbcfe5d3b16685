"""The filters shared by every page: time window, substrates, tiers, fidelity, vantage.

Why they live in the sidebar drawn by `app.py`: widgets drawn by the entrypoint exist on every
page, so a choice made on one page survives the move to another (docs/dashboard.md); each is
bound to the URL (`rtax.dashboard.urlstate`), so a link carries them.
"""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd
import streamlit as st

from rtax.dashboard import data, urlstate

#: Window label -> seconds (None: everything in the database).
WINDOWS: dict[str, int | None] = {
    "last hour": 3_600,
    "last 6 hours": 21_600,
    "last 24 hours": 86_400,
    "last 7 days": 604_800,
    "last 30 days": 2_592_000,
    "all time": None,
}
DEFAULT_WINDOW = "all time"
_STATE = "rtax_filters"


@dataclass(frozen=True)
class Filters:
    window: str = DEFAULT_WINDOW
    substrates: tuple[str, ...] = ()  # empty: all
    tiers: tuple[str, ...] = ()
    fidelities: tuple[str, ...] = ()
    #: where the probes ran (docs/ray.md#vantages); empty: all
    vantages: tuple[str, ...] = ()
    #: let series whose workload toolchain differs from the floor's into spreads and projections
    include_incomparable: bool = False

    @property
    def key(self) -> data.FilterKey:
        """The hashable form the cached readers take."""
        return (WINDOWS[self.window], self.substrates, self.tiers, self.fidelities, self.vantages)

    def describe(self) -> str:
        def part(values: tuple[str, ...]) -> str:
            return ", ".join(values) if values else "all"

        return (
            f"{self.window}; substrates: {part(self.substrates)}; tiers: {part(self.tiers)};"
            f" fidelity: {part(self.fidelities)}; vantage: {part(self.vantages)}"
        )

    def parts(self) -> list[str]:
        """The choice as file-name parts (a snapshot's name): the window, then each value
        chosen, then "incomparable" when those series are let in."""
        chosen = [self.window, *self.substrates, *self.tiers, *self.fidelities, *self.vantages]
        return chosen + (["incomparable"] if self.include_incomparable else [])


def sidebar(db: str) -> Filters:
    """Draw the shared filter widgets and remember the choice for the page about to run."""
    if data.unreadable(db) is not None:  # `current` says why, on the page
        st.session_state[_STATE] = Filters()
        return Filters()
    present = data.options(db)
    with st.sidebar:
        st.header("Filters")
        window = st.selectbox(
            "Time window",
            list(WINDOWS),
            index=list(WINDOWS).index(DEFAULT_WINDOW),
            **urlstate.bound("f_window"),
        )
        substrates = st.multiselect(
            "Substrates",
            present["substrate"],
            placeholder="all substrates",
            **urlstate.bound("f_substrates"),
        )
        tiers = st.multiselect(
            "Tiers", present["tier"], placeholder="all tiers", **urlstate.bound("f_tiers")
        )
        fidelities = st.multiselect(
            "Fidelity",
            present["fidelity"],
            **urlstate.bound("f_fidelities"),
            placeholder="all fidelities",
            help="real: measured here; emulated: real client against a local emulation; "
            "modelled: injected latencies. Series are labelled by fidelity and mode and "
            "never merged.",
        )
        vantages = st.multiselect(
            "Vantages",
            present.get("vantage", []),
            placeholder="all vantages",
            **urlstate.bound("f_vantages"),
            help="Where the probe ran: local (this host) or a Ray node's vantage label "
            "(docs/ray.md). The same substrate seen from two vantages is two series, "
            "never merged.",
        )
        incomparable = st.toggle(
            "Include series not comparable to the floor",
            value=False,
            **urlstate.bound("f_incomparable"),
            help="A series marked '(toolchain ≠ floor)' ran other programs than the local "
            "floor (another pytest, another Python): its numbers are not the substrate's tax "
            "alone. Spreads and projections leave such series out unless this is on.",
        )
    chosen = Filters(
        window, tuple(substrates), tuple(tiers), tuple(fidelities), tuple(vantages), incomparable
    )
    st.session_state[_STATE] = chosen
    return chosen


def for_comparison(runs: pd.DataFrame, chosen: Filters) -> pd.DataFrame:
    """The runs that spreads and projections may compare: the floor's toolchain only, unless
    the user opted in to the others."""
    if chosen.include_incomparable or runs.empty:
        return runs
    return runs[runs["comparable"].astype(bool)]


def chosen() -> Filters:
    """The filters chosen in the sidebar for this run (defaults when run without `app.py`),
    without `current`'s check of the database."""
    return st.session_state.get(_STATE, Filters())


def _through_the_router() -> None:
    """Make sure this page runs under `app.py`. Until some session of the server process has
    run `st.navigation`, Streamlit treats the `pages/` folder beside `app.py` the old way and
    runs a page asked for by URL (``/projection?...``: a shared link, opened first after a
    restart) on its own, without the sidebar and so without the link's filters. Such a run
    turns that off, as `st.navigation` itself would, and runs again through the router."""
    if _STATE in st.session_state:  # app.py has run in this session
        return
    from streamlit.runtime.pages_manager import PagesManager

    if PagesManager.uses_pages_directory:
        PagesManager.uses_pages_directory = False
        st.rerun()


def current() -> Filters:
    """The filters chosen in the sidebar for this run (defaults when run without `app.py`).
    Every page asks first, so a database the dashboard must not read as it is (an older
    schema, which only a writer may upgrade) stops every page with the reason."""
    _through_the_router()
    problem = data.unreadable(data.database())
    if problem is not None:
        st.error(problem)
        st.stop()
    return chosen()
