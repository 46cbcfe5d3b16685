"""The store's load runs: the `LoadRuns` table of a `Store` (docs/load.md#the-record).

Why a load run is written twice: its row is written when it starts (status ``running``,
`LoadRuns.begin`) and finished when it ends (``complete`` or ``interrupted``,
`LoadRuns.finish`), so a load run whose process died is still there, saying so; its rollouts
are ordinary runs that name it (``runs.load_id``, ``runs.load_index``), saved one by one as they
finish through the same writer and spool as every rollout.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pandas as pd

from rtax.store.schema import LOAD_ROLLOUT_COLUMNS, LOAD_RUN_COLUMNS, RUN_COLUMNS
from rtax.store.sql import Table, chunks, insert, marks, select

_FILTERS = frozenset({"substrate", "tier", "steps", "fidelity", "mode", "status", "load_id"})


class LoadRuns(Table):
    """Load runs and their rollouts."""

    def begin(self, row: dict[str, Any]) -> None:
        """Insert a load run as it starts (its figures come with `finish`)."""
        # a load run of cold creates unless it says otherwise (`rtax fork` compares the paths)
        row = {"launch_type": "cold", **row, "status": "running"}
        unknown = set(row) - set(LOAD_RUN_COLUMNS)
        if unknown:
            raise ValueError(f"not a load run column: {', '.join(sorted(unknown))}")
        columns = [f"[{c}]" for c in LOAD_RUN_COLUMNS]
        with self.transaction():
            self.db.conn.execute(
                insert("load_runs", columns), [row.get(c) for c in LOAD_RUN_COLUMNS]
            )

    def finish(self, load_id: str, figures: dict[str, Any]) -> None:
        """Write a load run's figures and final status (``complete`` or ``interrupted``)."""
        unknown = set(figures) - set(LOAD_RUN_COLUMNS) | ({"load_id"} & set(figures))
        if unknown:
            raise ValueError(f"not a load run figure: {', '.join(sorted(unknown))}")
        assignments = ", ".join(f"[{c}] = ?" for c in figures)
        with self.transaction():
            cursor = self.db.conn.execute(
                f"UPDATE load_runs SET {assignments} WHERE load_id = ?",
                [*figures.values(), load_id],
            )
            if cursor.rowcount != 1:
                raise ValueError(f"no load run {load_id!r} to finish")

    def read(self, *, since: str | None = None, **filters: Any) -> pd.DataFrame:
        """Load runs started since `since` (all if None) matching the filters (a value or a
        list per column; None: no filter), oldest first."""
        clauses, params = [], []
        if since is not None:
            clauses.append("started_at >= ?")
            params.append(str(since))
        for key, value in filters.items():
            if value is None:
                continue
            if key not in _FILTERS:
                raise ValueError(f"unknown filter {key!r}")
            values = list(value) if isinstance(value, list | tuple | set) else [value]
            clauses.append(f"[{key}] IN ({marks(values)})")
            params.extend(values)
        where = f"WHERE {' AND '.join(clauses)}" if clauses else ""
        return self._frame(f"SELECT * FROM load_runs {where} ORDER BY started_at, load_id", params)

    def rollouts(
        self, load_ids: Sequence[str], columns: Sequence[str] = LOAD_ROLLOUT_COLUMNS
    ) -> pd.DataFrame:
        """The rollouts of the given load runs (an indexed read), in launch order; `columns`:
        of runs (`rtax.store.schema.RUN_COLUMNS`)."""
        columns_sql = select(columns, RUN_COLUMNS)
        frames = [
            self._frame(
                f"SELECT {columns_sql} FROM runs WHERE load_id IN ({marks(chunk)}) "
                "ORDER BY load_id, load_index",
                chunk,
            )
            for chunk in chunks(load_ids)
        ]
        frames = [f for f in frames if not f.empty]
        if not frames:
            return pd.DataFrame(columns=list(columns))
        return frames[0] if len(frames) == 1 else pd.concat(frames, ignore_index=True)
