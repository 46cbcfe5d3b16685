"""The SQLite store, the only package that writes SQL: the `Store` and its tables, migrations,
the spool and retention.

What a user needs is here: `Store` (``store.runs``, ``store.summaries``, ``store.incidents``,
``store.loads``, ``store.rollups``, ``store.maintenance``), `StoreError`, and one column list
per table (`rtax.store.schema`), which the dashboard, the alerts and the exports read instead of
listing columns again.
"""

from rtax.store.database import Store
from rtax.store.schema import (
    ACTION_COLUMNS,
    INCIDENT_COLUMNS,
    LOAD_ROLLOUT_COLUMNS,
    LOAD_RUN_COLUMNS,
    MAINTENANCE_COLUMNS,
    OPTION_COLUMNS,
    PAGE_COLUMNS,
    ROLLUP_COLUMNS,
    RUN_COLUMNS,
    SNAPSHOT_COLUMNS,
    SUMMARY_COLUMNS,
    SUMMARY_KEY,
)
from rtax.store.sql import StoreError

__all__ = [
    "ACTION_COLUMNS",
    "INCIDENT_COLUMNS",
    "LOAD_ROLLOUT_COLUMNS",
    "LOAD_RUN_COLUMNS",
    "MAINTENANCE_COLUMNS",
    "OPTION_COLUMNS",
    "PAGE_COLUMNS",
    "ROLLUP_COLUMNS",
    "RUN_COLUMNS",
    "SNAPSHOT_COLUMNS",
    "SUMMARY_COLUMNS",
    "SUMMARY_KEY",
    "Store",
    "StoreError",
]
