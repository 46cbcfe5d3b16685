"""The store's incidents table and its alert outbox: the `Incidents` table of a `Store`.

Why the outbox is the incidents table (docs/alerts.md#incidents): an alert's delivery state lives
on its incident's row, written in the same transaction that opens or resolves it, so an
incident is never without its pending alert, and a restart finds every alert still to send.

Alert states (``alert_open``, ``alert_resolved``): ``pending`` (to send), ``sent``,
``suppressed`` (the cool-down), ``silenced`` (opened inside a maintenance window), ``off`` (no
webhook configured). ``alert_resolved`` is NULL while the incident is open.

The lifecycle (docs/alerts.md#lifecycle): ``state`` is ``open`` or ``resolved``; an open
incident may be acknowledged (``acknowledged_at``, ``acknowledged_note``); a resolved one says
why (``resolution``: ``recovered``, ``baseline``, ``manual``, ``rule_removed``), when
(``resolved_at``) and with what ``note``.
"""

from __future__ import annotations

from typing import Any

import pandas as pd

from rtax.core.series import DIMENSIONS, MISSING
from rtax.store.schema import INCIDENT_COLUMNS
from rtax.store.sql import Table, insert

#: The columns that make a series (`rtax.core.series.DIMENSIONS`); an incident keeps its series
#: as `Series.key` text too.
SERIES_COLUMNS: tuple[str, ...] = DIMENSIONS
#: The parts of a series an incident written without them has (a cold, local one).
MISSING_PARTS = {k: MISSING[k] for k in ("launch_type", "vantage")}


class Incidents(Table):
    """Incidents and their alerts."""

    # -- incidents -------------------------------------------------------------------------

    def open(self, series: str | None = None) -> list[dict[str, Any]]:
        """The open incidents (of one series), oldest first."""
        sql = "SELECT * FROM incidents WHERE state = 'open'"
        params: list[Any] = []
        if series is not None:
            sql += " AND series = ?"
            params.append(series)
        return self._rows(sql + " ORDER BY id", params)

    def last_alerted(self, series: str, metric: str, rule: str) -> str | None:
        """When the newest incident of this key that alerts (or will) opened: the cool-down's
        reference."""
        row = self._one(
            "SELECT max(opened_at) FROM incidents WHERE series = ? AND metric = ? AND rule = ? "
            "AND alert_open IN ('pending', 'sent')",
            [series, metric, rule],
        )
        return row[0] if row else None

    def add(self, incident: dict[str, Any]) -> int:
        """Insert an open incident (`INCIDENT_COLUMNS`); return its id."""
        row = {
            **MISSING_PARTS,
            **incident,
            "state": "open",
            "end": None,
            "alert_attempts": 0,
        }
        columns = [f"[{c}]" for c in INCIDENT_COLUMNS]
        with self.transaction():
            cursor = self.db.conn.execute(
                insert("incidents", columns), [row.get(c) for c in INCIDENT_COLUMNS]
            )
        return int(cursor.lastrowid)

    def resolve(
        self,
        incident_id: int,
        end: str,
        resolution: str,
        *,
        at: str,
        detail: str | None = None,
        note: str | None = None,
    ) -> bool:
        """Close an open incident at `end` (its last sample) for `resolution`, at time `at`;
        its resolved alert is pending when its opened one was sent or still is, otherwise it
        shares the opened one's fate (suppressed, silenced, off). False: no such open one."""
        with self.transaction():
            cursor = self.db.conn.execute(
                "UPDATE incidents SET state = 'resolved', [end] = ?, resolution = ?, "
                "resolved_at = ?, note = coalesce(?, note), detail = coalesce(?, detail), "
                "alert_resolved = CASE WHEN alert_open IN ('pending', 'sent') THEN 'pending' "
                "ELSE alert_open END WHERE id = ? AND state = 'open'",
                [end, resolution, at, note, detail, incident_id],
            )
        return cursor.rowcount == 1

    def acknowledge(self, incident_id: int, at: str, note: str | None = None) -> bool:
        """Mark an open incident acknowledged at `at` (someone is on it); a second
        acknowledgement keeps the first time and takes the newer note. False: no such open
        incident."""
        with self.transaction():
            cursor = self.db.conn.execute(
                "UPDATE incidents SET acknowledged_at = coalesce(acknowledged_at, ?), "
                "acknowledged_note = coalesce(?, acknowledged_note) "
                "WHERE id = ? AND state = 'open'",
                [at, note, incident_id],
            )
        return cursor.rowcount == 1

    def get(self, incident_id: int) -> dict[str, Any] | None:
        """One incident's row (None: no such id)."""
        rows = self._rows("SELECT * FROM incidents WHERE id = ?", [incident_id])
        return rows[0] if rows else None

    def last_resolved(self, series: str) -> list[dict[str, Any]]:
        """The newest resolved incident of each metric and rule of one series."""
        return self._rows(
            "SELECT * FROM incidents WHERE id IN (SELECT max(id) FROM incidents "
            "WHERE series = ? AND state = 'resolved' GROUP BY metric, rule)",
            [series],
        )

    def set_vantages(self, incident_id: int, seen: str) -> None:
        """Record from how many vantages an incident is seen (``2 of 3: eu, us``)."""
        with self.transaction():
            self.db.conn.execute(
                "UPDATE incidents SET vantages = ? WHERE id = ?", [seen, incident_id]
            )

    def read(self, *, state: str | None = None, limit: int | None = 50) -> pd.DataFrame:
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
        row = self._one(
            "SELECT min(coalesce(alert_next_at, '')) FROM incidents "
            "WHERE alert_open = 'pending' OR alert_resolved = 'pending'"
        )
        return row[0] if row else None

    def alert_sent(self, incident_id: int, event: str, at: str) -> None:
        """Mark the `event` alert of an incident delivered at `at`."""
        column = "alert_open" if event == "opened" else "alert_resolved"
        with self.transaction():
            self.db.conn.execute(
                f"UPDATE incidents SET {column} = 'sent', {column}_sent_at = ?, "
                "alert_attempts = 0, alert_next_at = NULL, alert_error = NULL WHERE id = ?",
                [at, incident_id],
            )

    def alert_failed(self, incident_id: int, attempts: int, next_at: str, error: str) -> None:
        """Record a failed delivery; the alert stays pending, due again at `next_at`."""
        with self.transaction():
            self.db.conn.execute(
                "UPDATE incidents SET alert_attempts = ?, alert_next_at = ?, alert_error = ? "
                "WHERE id = ?",
                [attempts, next_at, error, incident_id],
            )
