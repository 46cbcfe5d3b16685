"""The store's rollups: the `Rollups` table of a `Store`, what retention keeps of folded history.

Why a table of its own (docs/configuration.md#retention): retention (`rtax.store.retention`)
folds raw runs past their age into per-series, per-bucket rows that keep counts, sums,
extremes and a quantile sketch; `Store.fold_runs` writes them and deletes the runs they
summarize in one transaction.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pandas as pd

from rtax.store.schema import ROLLUP_COLUMNS
from rtax.store.sql import Table, insert


class Rollups(Table):
    """Rollup rows, one per series, bucket and metric (`ROLLUP_COLUMNS`)."""

    def write(self, rows: Sequence[dict[str, Any]]) -> None:
        """Write (already merged) rollup rows, replacing those of the same key, in the caller's
        transaction when one is open."""
        with self.transaction():
            self.db.conn.executemany(
                insert("rollups", ROLLUP_COLUMNS, "INSERT OR REPLACE"),
                ([r.get(c) for c in ROLLUP_COLUMNS] for r in rows),
            )

    def read(
        self, *, since: str | None = None, until: str | None = None, metric: str | None = None
    ) -> pd.DataFrame:
        """Rollup rows whose bucket starts in [since, until), for one metric or all."""
        clauses, params = [], []
        for clause, value in (
            ("bucket_start >= ?", since),
            ("bucket_start < ?", until),
            ("metric = ?", metric),
        ):
            if value is not None:
                clauses.append(clause)
                params.append(value)
        where = f"WHERE {' AND '.join(clauses)}" if clauses else ""
        return self._frame(f"SELECT * FROM rollups {where} ORDER BY bucket_start", params)

    def any(self, since: str | None = None) -> bool:
        """Whether any rollup bucket starts at or after `since` (all time if None)."""
        sql = "SELECT 1 FROM rollups" + (" WHERE bucket_start >= ?" if since else "") + " LIMIT 1"
        return self._one(sql, [since] if since else []) is not None
