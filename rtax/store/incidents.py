"""The store's incidents table and its alert outbox: part of `rtax.store.database.Store`, kept apart.

Why here (docs/alerts.md#incidents): the store owns all SQL, and `Store` would pass its size;
this is a mixin of `Store` (it uses its connection, its transactions and `_frame`), never
used alone. An alert's delivery state lives on its incident's row, written in the same
transaction that opens or resolves it, so an incident is never without its pending alert,
and a restart finds every alert still to send.

Alert states (``alert_open``, ``alert_resolved``): ``pending`` (to send), ``sent``,
``suppressed`` (the cool-down), ``off`` (no webhook configured). ``alert_resolved`` is NULL
while the incident is open.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pandas as pd

from rtax.core.series import DIMENSIONS
from rtax.store.migrations import INCIDENT_COLUMNS

#: The columns that make a series (`rtax.core.series.DIMENSIONS`); an incident keeps its series
#: as `Series.key` text too.
SERIES_COLUMNS: tuple[str, ...] = DIMENSIONS


class IncidentStore:
    """Incidents and their alerts (mixed into `rtax.store.database.Store`)."""

    db: Any

    def _transaction(self) -> Any:  # pragma: no cover - provided by Store
        raise NotImplementedError

    def _frame(self, sql: str, params: list[Any]) -> pd.DataFrame:  # pragma: no cover
        raise NotImplementedError

    # -- series ----------------------------------------------------------------------------

    def series_seen(self, since: str) -> pd.DataFrame:
        """Each series probed since `since`, with its newest ``started_at`` (``last``)."""
        columns = ", ".join(SERIES_COLUMNS)
        return self._frame(
            f"SELECT {columns}, max(started_at) AS last FROM runs WHERE started_at >= ? "
            f"GROUP BY {columns} ORDER BY {columns}",
            [since],
        )

    # -- incidents -------------------------------------------------------------------------

    def open_incidents(self, series: str | None = None) -> list[dict[str, Any]]:
        """The open incidents (of one series), oldest first."""
        sql = "SELECT * FROM incidents WHERE state = 'open'"
        params: list[Any] = []
        if series is not None:
            sql += " AND series = ?"
            params.append(series)
        return self._rows(sql + " ORDER BY id", params)

    def incident_started(self, series: str, metric: str, rule: str, start: str) -> bool:
        """Whether an incident of this series, metric and rule already began at `start` (a
        change that resolved is not opened again while detection still sees it)."""
        row = self.db.execute(
            "SELECT 1 FROM incidents WHERE series = ? AND metric = ? AND rule = ? AND start = ?",
            [series, metric, rule, start],
        ).fetchone()
        return row is not None

    def last_alerted(self, series: str, metric: str, rule: str) -> str | None:
        """When the newest incident of this key that alerts (or will) opened: the cool-down's
        reference."""
        row = self.db.execute(
            "SELECT max(opened_at) FROM incidents WHERE series = ? AND metric = ? AND rule = ? "
            "AND alert_open IN ('pending', 'sent')",
            [series, metric, rule],
        ).fetchone()
        return row[0] if row else None

    def add_incident(self, incident: dict[str, Any]) -> int:
        """Insert an open incident (`INCIDENT_COLUMNS`); return its id."""
        row = {**incident, "state": "open", "end": None, "alert_attempts": 0}
        columns = ", ".join(f"[{c}]" for c in INCIDENT_COLUMNS)
        marks = ", ".join("?" for _ in INCIDENT_COLUMNS)
        with self._transaction():
            cursor = self.db.conn.execute(
                f"INSERT INTO incidents ({columns}) VALUES ({marks})",
                [row.get(c) for c in INCIDENT_COLUMNS],
            )
        return int(cursor.lastrowid)

    def resolve_incident(self, incident_id: int, end: str, detail: str | None = None) -> None:
        """Close an open incident at `end`; its resolved alert is pending when its opened one
        was sent or still is, otherwise it shares the opened one's fate (suppressed, off)."""
        with self._transaction():
            self.db.conn.execute(
                "UPDATE incidents SET state = 'resolved', [end] = ?, "
                "detail = coalesce(?, detail), alert_resolved = CASE WHEN alert_open IN "
                "('pending', 'sent') THEN 'pending' ELSE alert_open END "
                "WHERE id = ? AND state = 'open'",
                [end, detail, incident_id],
            )

    def incidents(self, *, state: str | None = None, limit: int | None = 50) -> pd.DataFrame:
        """Incidents, newest first (`state`: open or resolved; all when None)."""
        sql, params = "SELECT * FROM incidents", []
        if state is not None:
            sql += " WHERE state = ?"
            params.append(state)
        sql += " ORDER BY opened_at DESC, id DESC"
        if limit is not None:
            sql += " LIMIT ?"
            params.append(int(limit))
        return self._frame(sql, params)

    # -- the alert outbox --------------------------------------------------------------------

    def due_alerts(self, now: str) -> list[dict[str, Any]]:
        """Incidents with an alert to send now, with ``event`` (opened, then resolved: a
        resolved alert waits for its opened one)."""
        return self._rows(
            "SELECT *, CASE WHEN alert_open = 'pending' THEN 'opened' ELSE 'resolved' END "
            "AS event FROM incidents WHERE (alert_open = 'pending' OR alert_resolved = "
            "'pending') AND (alert_next_at IS NULL OR alert_next_at <= ?) ORDER BY opened_at, id",
            [now],
        )

    def next_alert_at(self) -> str | None:
        """When the earliest pending alert is due (None: none pending; '' : due now)."""
        row = self.db.execute(
            "SELECT min(coalesce(alert_next_at, '')) FROM incidents "
            "WHERE alert_open = 'pending' OR alert_resolved = 'pending'"
        ).fetchone()
        return row[0] if row else None

    def alert_sent(self, incident_id: int, event: str, at: str) -> None:
        """Mark the `event` alert of an incident delivered at `at`."""
        column = "alert_open" if event == "opened" else "alert_resolved"
        with self._transaction():
            self.db.conn.execute(
                f"UPDATE incidents SET {column} = 'sent', {column}_sent_at = ?, "
                "alert_attempts = 0, alert_next_at = NULL, alert_error = NULL WHERE id = ?",
                [at, incident_id],
            )

    def alert_failed(self, incident_id: int, attempts: int, next_at: str, error: str) -> None:
        """Record a failed delivery; the alert stays pending, due again at `next_at`."""
        with self._transaction():
            self.db.conn.execute(
                "UPDATE incidents SET alert_attempts = ?, alert_next_at = ?, alert_error = ? "
                "WHERE id = ?",
                [attempts, next_at, error, incident_id],
            )

    def _rows(self, sql: str, params: list[Any]) -> list[dict[str, Any]]:
        with _cursor(self.db.conn, sql, params) as cursor:
            names = [d[0] for d in cursor.description]
            return [dict(zip(names, row, strict=True)) for row in cursor.fetchall()]


@contextmanager
def _cursor(conn: Any, sql: str, params: list[Any]) -> Iterator[Any]:
    cursor = conn.execute(sql, params)
    try:
        yield cursor
    finally:
        cursor.close()
