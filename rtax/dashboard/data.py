"""Cached readers for the dashboard: the store's queries behind `st.cache_data` with a short TTL.

Why here (docs/dashboard.md): pages stay thin and never touch SQL; every reader takes plain,
hashable arguments (the database path and a `Filters`' tuple form) and opens its own connection,
since a sqlite connection must not be shared across Streamlit's session threads. The TTL keeps
live pages live: a new probe shows within `TTL_S` seconds.
"""

from __future__ import annotations

import os
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pandas as pd
import streamlit as st

from rtax.analysis import maintenance, slo, stats, status, summaries, timeline
from rtax.analysis.incidents import stamp
from rtax.analysis.maintenance import Window
from rtax.core import paths
from rtax.core.series import Series
from rtax.dashboard import board, objectives
from rtax.store import (
    LOAD_ROLLOUT_COLUMNS,
    LOAD_RUN_COLUMNS,
    OPTION_COLUMNS,
    PAGE_COLUMNS,
    RUN_COLUMNS,
    SUMMARY_COLUMNS,
    Store,
    StoreError,
)

TTL_S = 10

#: (window seconds or None, substrates, tiers, fidelities, vantages): the hashable form of the
#: filters.
FilterKey = tuple[int | None, tuple[str, ...], tuple[str, ...], tuple[str, ...], tuple[str, ...]]


def _configured_substrates() -> dict[str, Any]:
    """The configuration's substrates (with their budgets), or {} without a valid one."""
    from rtax.settings import config

    try:
        return dict(config.load().substrates)
    except config.ConfigError:
        return {}


def configured_substrates() -> dict[str, Any]:
    """The configuration's substrates, with their budgets, limits and prices ({} without a
    valid configuration): what the pages compare the measurements with."""
    return _configured_substrates()


def rollout_deadline_s() -> float:
    """The rollouts' deadline as the configuration's scheduler table sets it (its default
    without a valid file): what a failed rollout holds a synchronous step to, by default."""
    return _scheduler()[0]


def leak_runs_on_s() -> float:
    """How long an environment whose cleanup failed runs on past its rollout before the
    scheduler's reaper removes it: a live owner's leftover goes once it expires (the rollout's
    deadline plus `kit.EXPIRY_GRACE_S`), found at the next reap, half an interval later on
    average."""
    from rtax.substrates import kit

    deadline, interval = _scheduler()
    return deadline + kit.EXPIRY_GRACE_S + interval / 2


def _scheduler() -> tuple[float, float]:
    """(deadline, reap interval) in seconds: the configuration's, else the defaults."""
    from rtax.settings import config
    from rtax.settings.scheduler import parse_scheduler

    try:
        conf = config.load()
        return conf.deadline_s, conf.reap_interval_s
    except config.ConfigError:  # an invalid file: the scheduler's defaults
        defaults = parse_scheduler({}, lambda *_: None)
        return defaults.deadline_s, defaults.reap_interval_s


@st.cache_data(ttl=TTL_S, show_spinner=False)
def spend_today(db: str) -> pd.DataFrame:
    """Today's (UTC) rollouts and environment-minutes per substrate beside the configured
    budgets: the same arithmetic the scheduler applies before each rollout (rtax.service.budget)."""
    from rtax.service import budget

    store = _open(db)
    if store is None:
        spend = pd.DataFrame(columns=["substrate", "fidelity", "rollouts", "env_minutes"])
    else:
        with store:
            spend = store.runs.spend(since=budget.day_start().isoformat(timespec="microseconds"))
    return budget.spend_table(spend, _configured_substrates())


def database() -> str:
    """The database the dashboard reads: `$RTAX_DB`, else the configuration's (the one the
    scheduler writes), else the embedded default."""
    if os.environ.get("RTAX_DB"):
        return os.environ["RTAX_DB"]
    from rtax.settings import config

    try:
        return str(config.load().database)
    except config.ConfigError:
        return str(paths.default_db())


def _query(key: FilterKey, now: datetime | None = None) -> dict[str, Any]:
    window_s, substrates, tiers, fidelities, vantages = key
    query: dict[str, Any] = {
        "substrate": list(substrates) or None,
        "tier": list(tiers) or None,
        "fidelity": list(fidelities) or None,
        "vantage": list(vantages) or None,
    }
    if window_s is not None:
        now = now or datetime.now(UTC)
        query["since"] = (now - timedelta(seconds=window_s)).isoformat(timespec="microseconds")
    return query


def _open(db: str) -> Store | None:
    """The store, read-only, or None when there is no database yet (an empty dashboard, not an
    error). Read-only because the dashboard writes nothing (docs/dashboard.md): it neither
    switches the journal nor migrates a file the scheduler owns."""
    if not Path(db).is_file():
        return None
    return Store(db, read_only=True)


def unreadable(db: str) -> str | None:
    """Why the dashboard can't read `db` (e.g. an older schema it must not upgrade), or None."""
    try:
        store = _open(db)
    except StoreError as exc:
        return str(exc)
    if store is not None:
        store.close()
    return None


def _empty_runs() -> pd.DataFrame:
    frame = pd.DataFrame({c: pd.Series(dtype=object) for c in PAGE_COLUMNS})
    return stats.add_series(frame)


@st.cache_data(ttl=TTL_S, show_spinner=False)
def runs(db: str, key: FilterKey) -> pd.DataFrame:
    """Runs for the filters, with a `series` column (substrate · mode [fidelity])."""
    store = _open(db)
    if store is None:
        return _empty_runs()
    with store:
        frame = store.runs.read(columns=PAGE_COLUMNS, **_query(key))
        floor = store.runs.floor_toolchain()
    return stats.add_series(frame, floor) if not frame.empty else _empty_runs()


#: Newest runs behind a page's distributions (box plots, ECDFs): a bounded, indexed slice,
#: never the whole window; the page says so, and its tables cover the whole window.
DISTRIBUTION_ROWS = 5_000


def _empty_summary() -> pd.DataFrame:
    frame = pd.DataFrame({c: pd.Series(dtype=object) for c in SUMMARY_COLUMNS})
    return frame.assign(series=[], workload=[], comparable=[])


@st.cache_data(ttl=TTL_S, show_spinner=False)
def summary(db: str, key: FilterKey, metrics: tuple[str, ...] | None = None) -> pd.DataFrame:
    """The summary rows (rtax.analysis.summaries) of the window and filters, raw and folded history
    alike, merged over the window's time buckets (one row per series, workload toolchain and
    metric: no page groups by time here, the Timeline reads its own), labelled with the pages'
    `series`, `workload` and `comparable` columns. `metrics`: only those (all if None). What
    every page's tables are computed from.

    Why merged here: the cache keeps (and pickles) what this returns, and a window of a year
    was 123,000 rows of sketches at a million runs (6 s of pickling alone); merged it is a few
    hundred, whatever the window."""
    store = _open(db)
    if store is None:
        return _empty_summary()
    with store:
        rows = store.summaries.read(metrics=list(metrics) if metrics else None, **_query(key))
        floor = store.runs.floor_toolchain()
    if rows.empty:
        return _empty_summary()
    return summaries.label(summaries.regroup(rows, summaries.WINDOW), floor)


@st.cache_data(ttl=TTL_S, show_spinner=False)
def newest_runs(db: str, key: FilterKey, limit: int = DISTRIBUTION_ROWS) -> pd.DataFrame:
    """The newest `limit` runs of the window (page columns, with `series`): the raw samples
    behind a distribution, bounded."""
    store = _open(db)
    if store is None:
        return _empty_runs()
    with store:
        frame = store.runs.read(columns=PAGE_COLUMNS, limit=limit, newest_first=True, **_query(key))
        floor = store.runs.floor_toolchain()
    return stats.add_series(frame, floor) if not frame.empty else _empty_runs()


@st.cache_data(ttl=TTL_S, show_spinner=False)
def snapshots(db: str) -> pd.DataFrame:
    """Every snapshot a restore path made (the store's snapshots table), oldest first."""
    store = _open(db)
    if store is None:
        return pd.DataFrame()
    with store:
        return store.snapshots.read()


@st.cache_data(ttl=TTL_S, show_spinner=False)
def idle_memory(db: str, key: FilterKey) -> pd.DataFrame:
    """What each pooled environment of the window held while it waited (`Runs.idle_memory`)."""
    store = _open(db)
    if store is None:
        return pd.DataFrame(columns=["substrate", "launch_type", "memory_bytes"])
    with store:
        return store.runs.idle_memory(**_query(key))


@st.cache_data(ttl=TTL_S, show_spinner=False)
def has_rollups(db: str, key: FilterKey) -> bool:
    """Whether retention has folded any history inside the window."""
    store = _open(db)
    if store is None:
        return False
    with store:
        return store.rollups.any(_query(key).get("since"))


@st.cache_data(ttl=TTL_S, show_spinner=False)
def options(db: str) -> dict[str, list[Any]]:
    """Values present in the database (raw and folded history), for the filter widgets."""
    store = _open(db)
    if store is None:
        return {column: [] for column in OPTION_COLUMNS}
    with store:
        return store.summaries.distinct()


@st.cache_data(ttl=TTL_S, show_spinner=False)
def counts(db: str, key: FilterKey) -> tuple[int, int]:
    """(runs, action rows) for the filters, from the summaries (no scan of actions); folded
    history counts its runs, and its action rows where it was summarized before folding."""
    rows = summary(db, key, ("wall_s", summaries.ACTION_ROWS))
    if rows.empty:
        return 0, 0
    runs = int(rows.loc[rows["metric"] == "wall_s", "runs"].sum())
    return runs, round(float(rows.loc[rows["metric"] == summaries.ACTION_ROWS, "sum"].sum()))


@st.cache_data(ttl=TTL_S, show_spinner=False)
def recent(db: str, key: FilterKey, table: str, limit: int) -> pd.DataFrame:
    """The newest `limit` raw rows of `table` for the filters (for display)."""
    store = _open(db)
    if store is None:
        return pd.DataFrame(columns=list(RUN_COLUMNS))
    with store:
        if table == "runs":
            return store.runs.read(limit=limit, newest_first=True, **_query(key))
        return store.runs.actions(limit=limit, newest_first=True, **_query(key))


def csv_of(db: str, key: FilterKey, table: str) -> bytes:
    """The whole `table` for the filters as CSV bytes. Called only when a user clicks a
    download button (Streamlit's deferred data), so pages never pay for it."""
    store = _open(db)
    if store is None:
        return b""
    with store:
        return "".join(store.runs.csv_chunks(table, **_query(key))).encode()


def frame_csv(frame: pd.DataFrame) -> bytes:
    return frame.to_csv(index=False).encode()


def _configuration() -> Any:
    """The configuration (plans and status rules), or None without a valid one."""
    from rtax.settings import config

    try:
        return config.load()
    except config.ConfigError:
        return None


@st.cache_data(ttl=TTL_S, show_spinner=False)
def status_board(db: str, key: FilterKey) -> list[status.Card]:
    """A card per series probed in the last week (the sidebar's substrates, tiers and
    fidelities; its window does not apply: the board is about now), judged by the
    configuration's ``[status]`` rules (docs/alerts.md#status), worst first."""
    store = _open(db)
    if store is None:
        return []
    filters = {k: v for k, v in _query(key).items() if k != "since"}
    with store:
        return board.read(store, filters, _configuration(), datetime.now(UTC))


@st.cache_data(ttl=TTL_S, show_spinner=False)
def slo_standings(db: str, keys: tuple[str, ...]) -> list[tuple[str, slo.Standing]]:
    """Per series of `keys` (series keys) and objective of the configuration that covers it,
    its label and standing now (`rtax.dashboard.objectives.standings`)."""
    configuration = _configuration()
    goals = configuration.slos if configuration is not None else ()
    store = _open(db) if goals and keys else None
    if store is None:
        return []
    with store:
        return objectives.standings(store, goals, keys, datetime.now(UTC))


@st.cache_data(ttl=TTL_S, show_spinner=False)
def timeline_span(db: str, key: FilterKey) -> float | None:
    """Seconds of history the filters cover (from the first day with a run to now, or the
    window when shorter); None without runs."""
    store = _open(db)
    if store is None:
        return None
    query = _query(key)
    with store:
        found = store.summaries.span(**query)
    if found is None:
        return None
    first = datetime.fromisoformat(found[0])
    if query.get("since"):
        first = max(first, datetime.fromisoformat(query["since"]))
    return max((datetime.now(UTC) - first).total_seconds(), 0.0)


@st.cache_data(ttl=TTL_S, show_spinner=False)
def timeline_series(db: str, key: FilterKey) -> dict[str, Series]:
    """The series with a run in the window: series key -> `Series`, in label order."""
    store = _open(db)
    if store is None:
        return {}
    with store:
        found = store.summaries.series(**_query(key))
    series = sorted((Series.of(r) for r in found.to_dict("records")), key=lambda s: s.label)
    return {s.key: s for s in series}


@st.cache_data(ttl=TTL_S, show_spinner=False)
def maintenance_windows(db: str) -> list[Window]:
    """Every maintenance window, the configuration's ``[[maintenance]]`` and the store's (``rtax
    maintenance add``) alike (docs/alerts.md#maintenance): what the Timeline shades."""
    configuration = _configuration()
    windows = list(configuration.maintenance) if configuration is not None else []
    store = _open(db)
    if store is None:
        return windows
    with store:
        return windows + maintenance.from_rows(store.maintenance.read())


@st.cache_data(ttl=TTL_S, show_spinner=False)
def timeline_points(
    db: str, key: FilterKey, column: str, bucket: str, series: tuple[str, ...] | None = None
) -> pd.DataFrame:
    """The timeline's points (`rtax.analysis.timeline.COLUMNS`) of one metric and bucket for the
    `series` keys (None: all): from the summaries for hours and days; for five minutes from
    the raw runs of the last `timeline.RAW_SPAN_S`, continued before them by the hourly
    summaries."""
    store = _open(db)
    if store is None:
        return pd.DataFrame(columns=timeline.COLUMNS)
    query = _query(key)
    since = query.pop("since", None)
    if series is not None:  # read only the picked series' rows (a superset; `keep` is exact)
        known = timeline_series(db, key)
        picked = [known[k] for k in series if k in known]
        for dimension in ("substrate", "tier", "steps", "mode"):
            query[dimension] = sorted({getattr(s, dimension) for s in picked})
    with store:
        if bucket in timeline.SUMMARY_BUCKET:
            grain = timeline.SUMMARY_BUCKET[bucket]
            rows = store.summaries.buckets(grain, metrics=[column], since=since, **query)
            return timeline.from_summaries(timeline.keep(rows, series), column, grain)
        cut = stamp(datetime.now(UTC) - timedelta(seconds=timeline.RAW_SPAN_S))
        raw_since = max(since, cut) if since else cut
        oldest = store.runs.oldest_start()
        raw_from = max(oldest, raw_since) if oldest else None
        columns = [*status.SERIES, "started_at", "status", "error_class", column]
        runs = store.runs.read(columns=list(dict.fromkeys(columns)), since=raw_since, **query)
        raw = timeline.from_runs(timeline.keep(runs, series), column, timeline.BUCKETS[bucket])
        until = summaries.start_of(raw_from) if raw_from else None
        hourly_rows = store.summaries.buckets(
            "hour", metrics=[column], since=since, until=until, **query
        )
        hourly = timeline.from_summaries(timeline.keep(hourly_rows, series), column, "hour")
    return timeline.continuous(raw, hourly, raw_from)


@st.cache_data(ttl=TTL_S, show_spinner=False)
def incident_list(db: str, limit: int = 500) -> pd.DataFrame:
    """The newest incidents, open and resolved."""
    store = _open(db)
    if store is None:
        return pd.DataFrame()
    with store:
        return store.incidents.read(limit=limit)


@st.cache_data(ttl=TTL_S, show_spinner=False)
def load_runs(db: str, key: FilterKey) -> pd.DataFrame:
    """The load runs started in the window, for the filters (docs/load.md), oldest first."""
    store = _open(db)
    if store is None:
        return pd.DataFrame(columns=list(LOAD_RUN_COLUMNS))
    with store:
        return store.loads.read(**_query(key))


@st.cache_data(ttl=TTL_S, show_spinner=False)
def load_rollouts(db: str, load_ids: tuple[str, ...]) -> pd.DataFrame:
    """The rollouts of those load runs (the page's columns), in launch order."""
    store = _open(db) if load_ids else None
    if store is None:
        return pd.DataFrame(columns=list(LOAD_ROLLOUT_COLUMNS))
    with store:
        return store.loads.rollouts(list(load_ids))


def capacity_bounds() -> Any:
    """The configuration's `[capacity]` bounds, else the defaults (docs/load.md#the-envelope)."""
    from rtax.settings import config
    from rtax.settings.loads import Bounds

    try:
        return config.load().capacity
    except config.ConfigError:
        return Bounds()


@st.cache_data(ttl=TTL_S, show_spinner=False)
def newest_run(db: str) -> str | None:
    """When the newest run in the database started (raw or folded history; None: no run, or
    no database): the data's age the footer shows, whatever the filters."""
    try:
        store = _open(db)
    except StoreError:
        return None
    if store is None:
        return None
    with store:
        found = store.summaries.span()
    return found[1] if found else None
