"""The store's maintenance table: windows added with ``rtax maintenance add``
(docs/alerts.md#maintenance).

Why a table beside the configuration's ``[[maintenance]]``: a window planned ahead belongs in
the file, reviewed with the rest; one opened on the spot ("the registry is being migrated, now
until 18:00") is added from the command line while the scheduler runs, and the scheduler reads
both at every detection pass. A window's series are its selector as JSON.
"""

from __future__ import annotations

import json
from typing import Any

from rtax.core.series import Selector
from rtax.store.schema import MAINTENANCE_COLUMNS
from rtax.store.sql import Table, insert


class Maintenance(Table):
    """Maintenance windows added at run time."""

    def add(self, selector: Selector, start: str, end: str, reason: str, created_at: str) -> int:
        """Store a window (ISO UTC times, `start` before `end`); return its id."""
        row = [json.dumps(selector.as_dict(), sort_keys=True), start, end, reason, created_at]
        with self.transaction():
            cursor = self.db.conn.execute(insert("maintenance", MAINTENANCE_COLUMNS), row)
        return int(cursor.lastrowid)

    def read(self, *, ending_after: str | None = None) -> list[dict[str, Any]]:
        """The windows (those that end after `ending_after`), by start; ``series`` parsed back
        into a `Selector`."""
        sql, params = "SELECT * FROM maintenance", []
        if ending_after is not None:
            sql += " WHERE [end] > ?"
            params.append(ending_after)
        rows = self._rows(sql + " ORDER BY start, id", params)
        for row in rows:
            row["series"] = Selector.from_dict(json.loads(row["series"]))
        return rows

    def remove(self, window_id: int) -> bool:
        """Delete a window (False: no such id); incidents it marked keep their mark."""
        with self.transaction():
            cursor = self.db.conn.execute("DELETE FROM maintenance WHERE id = ?", [window_id])
        return cursor.rowcount == 1
