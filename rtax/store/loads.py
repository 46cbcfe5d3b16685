"""The store's load runs: part of `rtax.store.database.Store`, kept apart (docs/load.md#the-record).

Why here: the store owns all SQL, and `Store` would pass its size; this is a mixin of `Store`
(it uses its connection, its transactions and `_frame`), never used alone. A load run's row is
written when it starts (status ``running``) and finished when it ends (``complete`` or
``interrupted``), so a load run whose process died is still there, saying so; its rollouts are
ordinary runs that name it (``runs.load_id``, ``runs.load_index``), saved one by one as they
finish through the same writer and spool as every rollout.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pandas as pd

from rtax.store.migrations import LOAD_RUN_COLUMNS

#: What `LoadStore.load_rollouts` reads of each rollout by default: what the Capacity page and
#: the envelope fit need, without the bulky provenance.
LOAD_ROLLOUT_COLUMNS: tuple[str, ...] = (
    "run_id",
    "load_id",
    "load_index",
    "started_at",
    "scheduled_at",
    "substrate",
    "mode",
    "fidelity",
    "tier",
    "steps",
    "status",
    "error_class",
    "create_s",
    "orchestration_s",
    "ready_s",
    "time_to_first_command_s",
    "wall_s",
)
_FILTERS = frozenset({"substrate", "tier", "steps", "fidelity", "mode", "status", "load_id"})


class LoadStore:
    """Load runs and their rollouts (mixed into `rtax.store.database.Store`)."""

    db: Any

    def _transaction(self) -> Any:  # pragma: no cover - provided by Store
        raise NotImplementedError

    def _frame(self, sql: str, params: list[Any]) -> pd.DataFrame:  # pragma: no cover
        raise NotImplementedError

    def begin_load_run(self, row: dict[str, Any]) -> None:
        """Insert a load run as it starts (its figures come with `finish_load_run`)."""
        row = {**row, "status": "running"}
        unknown = set(row) - set(LOAD_RUN_COLUMNS)
        if unknown:
            raise ValueError(f"not a load run column: {', '.join(sorted(unknown))}")
        columns = ", ".join(f"[{c}]" for c in LOAD_RUN_COLUMNS)
        marks = ", ".join("?" for _ in LOAD_RUN_COLUMNS)
        with self._transaction():
            self.db.conn.execute(
                f"INSERT INTO load_runs ({columns}) VALUES ({marks})",
                [row.get(c) for c in LOAD_RUN_COLUMNS],
            )

    def finish_load_run(self, load_id: str, figures: dict[str, Any]) -> None:
        """Write a load run's figures and final status (``complete`` or ``interrupted``)."""
        unknown = set(figures) - set(LOAD_RUN_COLUMNS) | ({"load_id"} & set(figures))
        if unknown:
            raise ValueError(f"not a load run figure: {', '.join(sorted(unknown))}")
        assignments = ", ".join(f"[{c}] = ?" for c in figures)
        with self._transaction():
            cursor = self.db.conn.execute(
                f"UPDATE load_runs SET {assignments} WHERE load_id = ?",
                [*figures.values(), load_id],
            )
            if cursor.rowcount != 1:
                raise ValueError(f"no load run {load_id!r} to finish")

    def load_runs(self, *, since: str | None = None, **filters: Any) -> pd.DataFrame:
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
            clauses.append(f"[{key}] IN ({', '.join('?' for _ in values)})")
            params.extend(values)
        where = f"WHERE {' AND '.join(clauses)}" if clauses else ""
        return self._frame(f"SELECT * FROM load_runs {where} ORDER BY started_at, load_id", params)

    def load_rollouts(
        self, load_ids: Sequence[str], columns: Sequence[str] = LOAD_ROLLOUT_COLUMNS
    ) -> pd.DataFrame:
        """The rollouts of the given load runs (an indexed read), in launch order."""
        select = ", ".join(f"[{c}]" for c in columns)
        frames = []
        for start in range(0, len(load_ids), 500):
            chunk = list(load_ids[start : start + 500])
            marks = ", ".join("?" for _ in chunk)
            frames.append(
                self._frame(
                    f"SELECT {select} FROM runs WHERE load_id IN ({marks}) "
                    "ORDER BY load_id, load_index",
                    chunk,
                )
            )
        frames = [f for f in frames if not f.empty]
        if not frames:
            return pd.DataFrame(columns=list(columns))
        return frames[0] if len(frames) == 1 else pd.concat(frames, ignore_index=True)
