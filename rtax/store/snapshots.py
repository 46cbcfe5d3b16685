"""The store's snapshots table: every snapshot a restore path made.

Why a table (docs/measurement.md#launch-paths): a snapshot's making is a measurement too (how
long it took, its set-up and warm-up, what it holds on disk), kept beside the restores it
served. A replaced or removed snapshot keeps its row: its figures stay history.
"""

from __future__ import annotations

from typing import Any

import pandas as pd

from rtax.store.schema import SNAPSHOT_COLUMNS
from rtax.store.sql import Table, insert


class Snapshots(Table):
    """Snapshots made for the restore and fork paths."""

    def add(self, row: dict[str, Any]) -> None:
        """Record a snapshot (`SNAPSHOT_COLUMNS`); the ones of the same substrate and tier
        still ``ready`` become ``replaced``."""
        unknown = set(row) - set(SNAPSHOT_COLUMNS)
        if unknown:
            raise ValueError(f"not a snapshot column: {', '.join(sorted(unknown))}")
        with self.transaction():
            self.db.conn.execute(
                "UPDATE snapshots SET state = 'replaced' WHERE substrate = ? AND tier = ? "
                "AND state = 'ready'",
                [row["substrate"], row["tier"]],
            )
            self.db.conn.execute(
                insert("snapshots", SNAPSHOT_COLUMNS), [row.get(c) for c in SNAPSHOT_COLUMNS]
            )

    def current(self, substrate: str, tier: str) -> dict[str, Any] | None:
        """The ready snapshot of a substrate and tier, if one is (the newest)."""
        rows = self._rows(
            "SELECT * FROM snapshots WHERE substrate = ? AND tier = ? AND state = 'ready' "
            "ORDER BY made_at DESC LIMIT 1",
            [substrate, tier],
        )
        return rows[0] if rows else None

    def set_state(self, snapshot_id: str, state: str) -> None:
        """Mark a snapshot ``replaced`` or ``removed`` (its files gone)."""
        with self.transaction():
            self.db.conn.execute(
                "UPDATE snapshots SET state = ? WHERE snapshot_id = ?", [state, snapshot_id]
            )

    def read(self, *, since: str | None = None) -> pd.DataFrame:
        """Snapshots (made since `since`), oldest first."""
        sql, params = "SELECT * FROM snapshots", []
        if since is not None:
            sql += " WHERE made_at >= ?"
            params.append(since)
        return self._frame(sql + " ORDER BY made_at, snapshot_id", params)
