"""The store: every raw sample in one SQLite file. The only module that writes SQL.

Why SQLite and raw samples (README.md#data): percentiles must be computed from the samples of the
window in view, so nothing is pre-aggregated; a single file is what an embedded default needs.

- ``runs``: one row per rollout (phases, status, error class, fidelity, provenance).
- ``actions``: one row per command of a rollout (ready attempts, setup, actions), linked by run_id.
- WAL mode, so the dashboard reads while the scheduler writes.
- One transaction per rollout: a 150-action trajectory is written whole or not at all.
- The schema version is SQLite's ``user_version``; `MIGRATIONS` upgrades older files in order, and a
  file newer than this rtax is refused rather than misread.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pandas as pd
import sqlite_utils

from rtax.probe import PHASES, RolloutRecord

RUN_COLUMNS: dict[str, type] = {
    "run_id": str,
    "started_at": str,
    "ended_at": str,
    "substrate": str,
    "kind": str,
    "tier": str,
    "steps": int,
    "seed": int,
    "fidelity": str,
    "status": str,
    "error_class": str,
    "error_message": str,
    **{f"{p}_s": float for p in PHASES},
    "overhead_s": float,
    "wall_s": float,
    "time_to_first_command_s": float,
    "episode_s": float,
    "n_actions": int,
    "n_actions_done": int,
    "cleanup_ok": int,
    "milestones": str,
    "host": str,
    "rtax_version": str,
    "endpoint": str,
    "provenance": str,
}
ACTION_COLUMNS: dict[str, type] = {
    "run_id": str,
    "seq": int,
    "phase": str,
    "idx": int,
    "category": str,
    "command": str,
    "exit_code": int,
    "latency_s": float,
    "exec_s": float,
    "t_offset_s": float,
    "stdout_bytes": int,
    "stderr_bytes": int,
    "ok": int,
    "error_class": str,
    "detail": str,
}


class StoreError(RuntimeError):
    """The database can't be used; the message says which file and why."""


def _v1(db: sqlite_utils.Database) -> None:
    """The first schema: runs and their actions."""
    db["runs"].create(RUN_COLUMNS, pk="run_id", not_null={"run_id", "substrate", "tier"})
    db["actions"].create(
        ACTION_COLUMNS, pk=("run_id", "seq"), foreign_keys=[("run_id", "runs", "run_id")]
    )


def _v2(db: sqlite_utils.Database) -> None:
    """Action mode (exec / session) on runs, and the indexes the dashboard's queries use."""
    db["runs"].add_column("mode", str, not_null_default="exec")
    db["runs"].create_index(["substrate", "tier", "steps", "started_at"], if_not_exists=True)
    db["runs"].create_index(["started_at"], if_not_exists=True)
    db["runs"].create_index(["fidelity", "status"], if_not_exists=True)


#: (version, migration), applied in order to files whose user_version is lower.
MIGRATIONS: tuple[tuple[int, Callable[[sqlite_utils.Database], None]], ...] = (
    (1, _v1),
    (2, _v2),
)
SCHEMA_VERSION = MIGRATIONS[-1][0]


class Store:
    """One SQLite database of rtax samples. Open one per thread (sqlite's rule)."""

    def __init__(self, path: str | Path, *, create: bool = True) -> None:
        self.path = Path(path)
        if not create and not self.path.is_file():
            raise StoreError(f"no database at {self.path}")
        if not self.path.parent.is_dir():
            raise StoreError(
                f"cannot open database {self.path}: folder {self.path.parent} does not exist"
            )
        # Autocommit mode: transactions are explicit (`_transaction`), because Python's sqlite3
        # opens none before DDL, and a half-applied migration must roll back.
        if self.path.is_dir():
            raise StoreError(f"cannot open database {self.path}: it is a folder")
        try:
            conn = sqlite3.connect(str(self.path), timeout=30, isolation_level=None)
        except sqlite3.Error as exc:
            raise StoreError(f"cannot open database {self.path}: {exc}") from exc
        try:
            self.db = sqlite_utils.Database(conn)
            self.db.execute("PRAGMA foreign_keys = ON")
            if self.version > SCHEMA_VERSION:
                raise StoreError(
                    f"{self.path} has schema version {self.version}, newer than this rtax "
                    f"understands ({SCHEMA_VERSION}); upgrade rtax"
                )
            if self.db.journal_mode != "wal":
                self.db.enable_wal()
            self.migrate()
        except sqlite3.DatabaseError as exc:
            conn.close()
            raise StoreError(f"cannot use {self.path} as an rtax database: {exc}") from exc
        except BaseException:
            conn.close()
            raise

    @property
    def version(self) -> int:
        return int(self.db.execute("PRAGMA user_version").fetchone()[0])

    def migrate(self) -> list[int]:
        """Apply pending migrations, each in its own transaction; return the versions applied."""
        applied = []
        for version, migration in MIGRATIONS:
            if version <= self.version:
                continue
            with self._transaction():
                migration(self.db)
                self.db.execute(f"PRAGMA user_version = {int(version)}")
            applied.append(version)
        return applied

    @contextmanager
    def _transaction(self) -> Iterator[None]:
        """BEGIN IMMEDIATE ... COMMIT, or ROLLBACK on any exception (Ctrl-C included)."""
        conn = self.db.conn
        conn.execute("BEGIN IMMEDIATE")
        try:
            yield
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        conn.execute("COMMIT")

    def close(self) -> None:
        self.db.conn.close()

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- writing -------------------------------------------------------------------------------

    def save_rollout(self, record: RolloutRecord) -> None:
        """Write a run and all its actions in one transaction (all or nothing)."""
        run_cols = [*RUN_COLUMNS, "mode"]
        run_sql = (
            f"INSERT INTO runs ({', '.join(run_cols)}) VALUES ({', '.join('?' for _ in run_cols)})"
        )
        act_cols = list(ACTION_COLUMNS)
        act_sql = (
            f"INSERT INTO actions ({', '.join(act_cols)}) "
            f"VALUES ({', '.join('?' for _ in act_cols)})"
        )
        run = {**record.run, "mode": record.run.get("mode") or "exec"}
        try:
            with self._transaction():
                self.db.conn.execute(run_sql, [run.get(c) for c in run_cols])
                self.db.conn.executemany(
                    act_sql, ([row.get(c) for c in act_cols] for row in record.actions)
                )
        except sqlite3.Error as exc:
            raise StoreError(f"cannot save run {run.get('run_id')}: {exc}") from exc

    # -- reading -------------------------------------------------------------------------------

    def runs(self, **filters: Any) -> pd.DataFrame:
        """Runs matching the filters (see `_where`), oldest first."""
        where, params = _where(filters, prefix="", allowed=_RUN_FILTERS)
        return self._frame(f"SELECT * FROM runs {where} ORDER BY started_at, run_id", params)

    def actions(self, *, phase: str | Sequence[str] | None = None, **filters: Any) -> pd.DataFrame:
        """Actions of the runs matching the filters, with their run's grouping columns."""
        if phase is not None:
            filters["_phase"] = phase
        where, params = _where(filters, prefix="r.", allowed=_RUN_FILTERS | {"_phase"})
        sql = (
            "SELECT a.*, r.substrate, r.kind, r.mode, r.tier, r.steps, r.fidelity, "
            "r.status AS run_status, r.started_at AS run_started_at "
            f"FROM actions a JOIN runs r ON r.run_id = a.run_id {where} "
            "ORDER BY r.started_at, a.run_id, a.seq"
        )
        return self._frame(sql, params)

    def count(self, table: str) -> int:
        if table not in ("runs", "actions"):
            raise StoreError(f"unknown table {table!r}")
        return int(self.db.execute(f"SELECT count(*) FROM {table}").fetchone()[0])

    def export_csv(self, table: str, out: str | Path, **filters: Any) -> int:
        """Write `table` (runs or actions) for the filters to a CSV file; return the row count."""
        if table == "runs":
            frame = self.runs(**filters)
        elif table == "actions":
            frame = self.actions(**filters)
        else:
            raise StoreError(f"unknown table {table!r} (choose runs or actions)")
        frame.to_csv(out, index=False)
        return len(frame)

    def _frame(self, sql: str, params: list[Any]) -> pd.DataFrame:
        return pd.read_sql_query(sql, self.db.conn, params=params)


_RUN_FILTERS = frozenset(
    {"substrate", "kind", "mode", "tier", "steps", "fidelity", "status", "run_id"}
)


def _where(filters: dict[str, Any], prefix: str, allowed: frozenset[str]) -> tuple[str, list[Any]]:
    """A WHERE clause from keyword filters: a value or a list of values per column, plus
    ``since`` / ``until`` (ISO UTC strings) on started_at. None means "no filter"."""
    clauses: list[str] = []
    params: list[Any] = []
    for key, value in filters.items():
        if value is None:
            continue
        if key == "since":
            clauses.append(f"{prefix}started_at >= ?")
            params.append(str(value))
        elif key == "until":
            clauses.append(f"{prefix}started_at < ?")
            params.append(str(value))
        elif key in allowed:
            column = "a.phase" if key == "_phase" else f"{prefix}{key}"
            values = list(value) if _is_many(value) else [value]
            clauses.append(f"{column} IN ({', '.join('?' for _ in values)})")
            params.extend(values)
        else:
            raise StoreError(f"unknown filter {key!r}")
    return ("WHERE " + " AND ".join(clauses)) if clauses else "", params


def _is_many(value: Any) -> bool:
    return isinstance(value, Iterable) and not isinstance(value, (str, bytes))
