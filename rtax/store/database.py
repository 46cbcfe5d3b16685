"""The store: every raw sample in one SQLite file. With its migrations (rtax.store.migrations), its
incidents (rtax.store.incidents) and its load runs (rtax.store.loads), mixins of `Store`, the
only module that writes SQL.

Why SQLite and raw samples (docs/data.md): percentiles must be computed from the samples of the
window in view; a single file is what an embedded default needs. Beside them the store keeps
per-series hourly summaries (rtax.analysis.summaries), written in the transaction that saves each run, so
the dashboard's first paint never scans every sample; raw samples stay the source of truth.

- ``runs``: one row per rollout (phases, status, error class, fidelity, provenance).
- ``actions``: one row per command of a rollout (ready attempts, setup, actions), linked by run_id.
- ``incidents``: changes and rule breaches per series, with their alerts (`rtax.store.incidents`).
- ``load_runs``: one row per sequential, staggered or burst load run (`rtax.store.loads`).
- WAL mode, so the dashboard reads while the scheduler writes.
- One transaction per rollout: a 150-action trajectory is written whole or not at all.
- The columns are `rtax.core.record`'s fields, in their order. The schema version is SQLite's
  ``user_version``; `rtax.store.migrations` upgrades older files in order, and a file newer than this
  rtax is refused rather than misread.
"""

from __future__ import annotations

import os
import sqlite3
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pandas as pd
import sqlite_utils

from rtax.analysis import summaries
from rtax.core import redaction
from rtax.core.record import ACTION_COLUMNS, ACTION_CONTEXT, RUN_COLUMNS, RolloutRecord
from rtax.core.series import LOCAL_VANTAGE
from rtax.store.incidents import IncidentStore
from rtax.store.loads import LoadStore
from rtax.store.migrations import MIGRATIONS, ROLLUP_COLUMNS, SCHEMA_VERSION
from rtax.store.sql import RUN_FILTERS as _RUN_FILTERS
from rtax.store.sql import StoreError
from rtax.store.sql import insert as _insert
from rtax.store.sql import limit as _limit
from rtax.store.sql import select as _select
from rtax.store.sql import where as _where
from rtax.store.summaries import SummaryStore

__all__ = ["BUSY_TIMEOUT_S", "Store", "StoreError", "default_busy_timeout_s"]

#: How long a writer waits for another's write lock before "database is locked" (SQLite's busy
#: timeout). Maintenance (`Store.compact`, `rtax.store.retention`) holds the lock far less than this.
BUSY_TIMEOUT_S = 30.0


def default_busy_timeout_s() -> float:
    """`BUSY_TIMEOUT_S`, or `$RTAX_BUSY_TIMEOUT` (seconds) when set."""
    value = os.environ.get("RTAX_BUSY_TIMEOUT")
    try:
        return float(value) if value else BUSY_TIMEOUT_S
    except ValueError:
        raise StoreError(f"RTAX_BUSY_TIMEOUT must be a number of seconds, got {value!r}") from None


#: Pages freed per incremental-vacuum step (4 MiB at SQLite's default page size): one step
#: holds the write lock for a few tens of milliseconds (docs/data.md#maintenance).
VACUUM_STEP_PAGES = 1000
#: Pause between maintenance steps (freeing pages, deleting folded runs): longer than SQLite's
#: longest sleep between a busy writer's retries (100 ms), so a waiting writer gets in.
YIELD_S = 0.15
#: A file without auto_vacuum is converted by one full VACUUM only up to this size (the rewrite
#: holds the write lock throughout: about 0.3 s for 64 MiB here).
FULL_VACUUM_LIMIT_BYTES = 64 * 1024 * 1024
#: How long truncating the write-ahead log may wait for readers and writers.
TRUNCATE_WAIT_S = 0.1
#: The write-ahead log is cut back to this size when it restarts.
WAL_LIMIT_BYTES = 64 * 1024 * 1024
_INCREMENTAL = 2


class Store(IncidentStore, SummaryStore, LoadStore):
    """One SQLite database of rtax samples. Open one per thread (sqlite's rule). Its
    incidents and alerts are `rtax.store.incidents`'s, its summaries `rtax.store.summaries`'s,
    its load runs `rtax.store.loads`'s."""

    def __init__(
        self,
        path: str | Path,
        *,
        create: bool = True,
        read_only: bool = False,
        busy_timeout_s: float | None = None,
    ) -> None:
        """Open (by default create) the database and upgrade it. `read_only` (the dashboard)
        never writes: no WAL switch, no migration, SQLite's ``mode=ro``; a file of an older
        schema is refused with a message instead of being upgraded. `busy_timeout_s`: SQLite's
        busy wait (`default_busy_timeout_s`)."""
        self.path = Path(path)
        if (read_only or not create) and not self.path.is_file():
            raise StoreError(f"no database at {self.path}")
        if not self.path.parent.is_dir():
            raise StoreError(
                f"cannot open database {self.path}: folder {self.path.parent} does not exist"
            )
        # Autocommit mode: transactions are explicit (`_transaction`), because Python's sqlite3
        # opens none before DDL, and a half-applied migration must roll back.
        if self.path.is_dir():
            raise StoreError(f"cannot open database {self.path}: it is a folder")
        target = f"{self.path.resolve().as_uri()}?mode=ro" if read_only else str(self.path)
        try:
            if busy_timeout_s is None:
                busy_timeout_s = default_busy_timeout_s()
            conn = sqlite3.connect(
                target, timeout=busy_timeout_s, isolation_level=None, uri=read_only
            )
            self._busy_timeout_s = busy_timeout_s
        except sqlite3.Error as exc:
            raise StoreError(f"cannot open database {self.path}: {exc}") from exc
        try:
            self.db = sqlite_utils.Database(conn)
            self.db.execute("PRAGMA query_only = ON" if read_only else "PRAGMA foreign_keys = ON")
            if self.version > SCHEMA_VERSION:
                raise StoreError(
                    f"{self.path} has schema version {self.version}, newer than this rtax "
                    f"understands ({SCHEMA_VERSION}); upgrade rtax"
                )
            if read_only and self.version < SCHEMA_VERSION:
                raise StoreError(
                    f"{self.path} has schema version {self.version}, older than this rtax's "
                    f"({SCHEMA_VERSION}); it is read as it is, never upgraded here: run the "
                    "scheduler (or `rtax probe --db` on it) once to upgrade it"
                )
            if not read_only:
                if self.version == 0:  # a new file: auto_vacuum can only be set before a table
                    self.db.execute(f"PRAGMA auto_vacuum = {_INCREMENTAL}")
                if self.db.journal_mode != "wal":
                    self.db.enable_wal()
                self.db.execute(f"PRAGMA journal_size_limit = {WAL_LIMIT_BYTES}")
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
        run = {
            **record.run,
            "mode": record.run.get("mode") or "exec",
            # a record made before launch types (a spool line of an older rtax) was cold
            "launch_type": record.run.get("launch_type") or "cold",
            "vantage": record.run.get("vantage") or LOCAL_VANTAGE,
        }
        try:
            with self._transaction():
                self.db.conn.execute(
                    _insert("runs", RUN_COLUMNS), [run.get(c) for c in RUN_COLUMNS]
                )
                self.db.conn.executemany(
                    _insert("actions", ACTION_COLUMNS),
                    ([row.get(c) for c in ACTION_COLUMNS] for row in record.actions),
                )
                self._add_summaries(
                    summaries.rows_of([run], {run.get("run_id"): len(record.actions)})
                )
        except sqlite3.Error as exc:
            raise StoreError(f"cannot save run {run.get('run_id')}: {exc}") from exc

    # -- reading -------------------------------------------------------------------------------

    def runs(
        self,
        *,
        columns: Sequence[str] | None = None,
        limit: int | None = None,
        newest_first: bool = False,
        **filters: Any,
    ) -> pd.DataFrame:
        """Runs matching the filters (see `_where`), oldest first unless `newest_first`.

        `columns` picks a subset (the dashboard skips the bulky provenance JSON); `limit` caps
        the rows."""
        select = _select(columns, RUN_COLUMNS)
        where, params = _where(filters, prefix="", allowed=_RUN_FILTERS)
        order = "DESC" if newest_first else "ASC"
        sql = f"SELECT {select} FROM runs {where} ORDER BY started_at {order}, run_id {order}"
        return self._frame(sql + _limit(limit, params), params)

    def actions(
        self,
        *,
        phase: str | Sequence[str] | None = None,
        limit: int | None = None,
        newest_first: bool = False,
        **filters: Any,
    ) -> pd.DataFrame:
        """Actions of the runs matching the filters, with their run's grouping columns.

        With `limit`, only the newest (or oldest) runs are joined: each run has at least one
        action row, so `limit` runs always hold `limit` actions, and no sort of the whole
        actions table is needed."""
        if phase is not None:
            filters["_phase"] = phase
        order = "DESC" if newest_first else "ASC"
        run_filters = {k: v for k, v in filters.items() if k != "_phase"}
        runs_where, params = _where(run_filters, prefix="", allowed=_RUN_FILTERS)
        runs_sql = f"SELECT * FROM runs {runs_where} ORDER BY started_at {order}, run_id {order}"
        runs_sql += _limit(limit, params)
        phase_where = ""
        if "_phase" in filters:
            phase_where, phase_params = _where(
                {"_phase": filters["_phase"]}, prefix="", allowed=frozenset({"_phase"})
            )
            params.extend(phase_params)
        sql = (
            f"SELECT a.*, {_ACTION_CONTEXT} FROM ({runs_sql}) r "
            f"JOIN actions a ON a.run_id = r.run_id {phase_where} "
            f"ORDER BY r.started_at {order}, a.run_id {order}, a.seq"
        )
        return self._frame(sql + _limit(limit, params), params)

    def count(self, table: str) -> int:
        if table not in ("runs", "actions"):
            raise StoreError(f"unknown table {table!r}")
        return int(self.db.execute(f"SELECT count(*) FROM {table}").fetchone()[0])

    def count_runs(self, **filters: Any) -> int:
        where, params = _where(filters, prefix="", allowed=_RUN_FILTERS)
        return int(self.db.execute(f"SELECT count(*) FROM runs {where}", params).fetchone()[0])

    def spend(self, **filters: Any) -> pd.DataFrame:
        """Per substrate and fidelity: rollouts started and environment-minutes used.

        Why wall time: an environment is billed from the create request until it is deleted,
        and a run's wall time spans exactly that (create through verified cleanup); a rollout
        that never got an environment (no wall time) costs nothing. Budgets
        (docs/configuration.md#budgets) are checked against this, per substrate name, since midnight
        UTC."""
        where, params = _where(filters, prefix="", allowed=_RUN_FILTERS)
        sql = (
            "SELECT substrate, fidelity, count(*) AS rollouts, "
            "coalesce(sum(wall_s), 0) / 60.0 AS env_minutes "
            f"FROM runs {where} GROUP BY substrate, fidelity ORDER BY substrate, fidelity"
        )
        return pd.read_sql_query(sql, self.db.conn, params=params)

    def floor_toolchain(self) -> str | None:
        """The toolchain digest of the newest successful real `local` run: the floor that
        other series are comparable to (docs/toolchain.md)."""
        row = self.db.execute(
            "SELECT toolchain FROM runs WHERE kind = 'local' AND fidelity = 'real' "
            "AND status = 'ok' AND toolchain IS NOT NULL ORDER BY started_at DESC LIMIT 1"
        ).fetchone()
        return row[0] if row else None

    def count_actions(self, **filters: Any) -> int:
        where, params = _where(filters, prefix="r.", allowed=_RUN_FILTERS)
        sql = f"SELECT count(*) FROM actions a JOIN runs r ON r.run_id = a.run_id {where}"
        return int(self.db.execute(sql, params).fetchone()[0])

    def distinct(self) -> dict[str, list[Any]]:
        """The values present in the grouping columns of runs (for the dashboard's filters)."""
        out = {}
        for column in ("substrate", "tier", "steps", "fidelity", "mode", "vantage"):
            rows = self.db.execute(f"SELECT DISTINCT [{column}] FROM runs ORDER BY 1").fetchall()
            out[column] = [r[0] for r in rows if r[0] is not None]
        return out

    def milestone_means(self, **filters: Any) -> pd.DataFrame:
        """Mean offset (s from the create or claim request) and n of each native milestone of
        successful runs, per substrate, mode, fidelity, launch type, vantage, tier and
        steps."""
        filters = {**filters, "status": "ok"}
        where, params = _where(filters, prefix="r.", allowed=_RUN_FILTERS)
        sql = (
            "SELECT r.substrate, r.mode, r.fidelity, r.launch_type, r.vantage, r.tier, r.steps, "
            "json_extract(m.value, '$.name') AS milestone, "
            "avg(json_extract(m.value, '$.t_s')) AS mean_t_s, count(*) AS n "
            f"FROM runs r, json_each(r.milestones) m {where} "
            "GROUP BY 1, 2, 3, 4, 5, 6, 7 ORDER BY 1, 2, 3, 4, 5, 6, 8"
        )
        return self._frame(sql, params)

    def csv_chunks(self, table: str, chunk_rows: int = 50_000, **filters: Any) -> Iterator[str]:
        """`table` for the filters as CSV text, chunk by chunk (memory stays bounded)."""
        for first, frame in self._export_frames(table, chunk_rows, filters):
            yield frame.to_csv(index=False, header=first)

    def _export_frames(
        self, table: str, chunk_rows: int, filters: dict[str, Any]
    ) -> Iterator[tuple[bool, pd.DataFrame]]:
        """(is the first chunk, rows) of `table` for the filters; at least one, maybe empty,
        chunk, so that a CSV always has its header."""
        if table == "runs":
            where, params = _where(filters, prefix="", allowed=_RUN_FILTERS)
            sql = f"SELECT * FROM runs {where} ORDER BY started_at, run_id"
            columns = list(RUN_COLUMNS)
        elif table == "actions":
            where, params = _where(filters, prefix="r.", allowed=_RUN_FILTERS)
            sql = (
                f"SELECT a.*, {_ACTION_CONTEXT} FROM actions a JOIN runs r ON r.run_id = a.run_id "
                f"{where} ORDER BY r.started_at, a.run_id, a.seq"
            )
            columns = [*ACTION_COLUMNS, *(name for _, name in ACTION_CONTEXT)]
        else:
            raise StoreError(f"unknown table {table!r} (choose runs or actions)")
        first = True
        for chunk in pd.read_sql_query(sql, self.db.conn, params=params, chunksize=chunk_rows):
            yield first, chunk
            first = False
        if first:
            yield True, pd.DataFrame(columns=columns)

    # -- retention -----------------------------------------------------------------------------

    def action_latencies(self, run_ids: Sequence[str]) -> pd.DataFrame:
        """(run_id, latency_s) of the `action` rows of the given runs."""
        if not run_ids:
            return pd.DataFrame(columns=["run_id", "latency_s"])
        marks = ", ".join("?" for _ in run_ids)
        return self._frame(
            f"SELECT run_id, latency_s FROM actions WHERE phase = 'action' AND run_id IN ({marks})",
            list(run_ids),
        )

    def rollups(
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

    def has_rollups(self, since: str | None = None) -> bool:
        """Whether any rollup bucket starts at or after `since` (all time if None)."""
        sql = "SELECT 1 FROM rollups" + (" WHERE bucket_start >= ?" if since else "") + " LIMIT 1"
        return self.db.execute(sql, [since] if since else []).fetchone() is not None

    def fold_runs(self, rollups: Sequence[dict[str, Any]], run_ids: Sequence[str]) -> None:
        """In one transaction: write the (already merged) rollup rows, then delete the runs they
        summarize and their actions. Either all of it happens or none."""
        with self._transaction():
            self.db.conn.executemany(
                _insert("rollups", ROLLUP_COLUMNS, "INSERT OR REPLACE"),
                ([r.get(c) for c in ROLLUP_COLUMNS] for r in rollups),
            )
            for start in range(0, len(run_ids), 500):
                chunk = list(run_ids[start : start + 500])
                marks = ", ".join("?" for _ in chunk)
                self.db.conn.execute(f"DELETE FROM actions WHERE run_id IN ({marks})", chunk)
                self.db.conn.execute(f"DELETE FROM runs WHERE run_id IN ({marks})", chunk)

    def compact(
        self,
        *,
        pause_s: float = YIELD_S,
        step_pages: int = VACUUM_STEP_PAGES,
        full_vacuum_up_to: int = FULL_VACUUM_LIMIT_BYTES,
    ) -> bool:
        """Give the space of deleted rows back to the file system without ever holding the write
        lock for long (docs/data.md#maintenance): freed pages go in steps of `step_pages`
        (incremental vacuum, one short transaction each, `pause_s` apart so that a waiting
        writer gets in), then the write-ahead log is checkpointed without waiting for readers.
        A file made without auto_vacuum (by rtax before it set it on new files) is converted by
        one full VACUUM only while it is small enough to rewrite quickly (`full_vacuum_up_to`
        bytes); a larger one reuses its freed pages but keeps its size.
        Returns whether freed pages went back to the file system."""
        conn = self.db.conn

        def incremental() -> bool:
            return int(conn.execute("PRAGMA auto_vacuum").fetchone()[0]) == _INCREMENTAL

        if not incremental() and self.path.stat().st_size <= full_vacuum_up_to:
            # The setting is the connection's until a VACUUM writes it into the file.
            conn.execute(f"PRAGMA auto_vacuum = {_INCREMENTAL}")
            conn.execute("VACUUM")
        returned = incremental()
        while returned and int(conn.execute("PRAGMA freelist_count").fetchone()[0]) > 0:
            # sqlite3's execute frees one page per step; executescript runs the whole pragma
            conn.executescript(f"PRAGMA incremental_vacuum({int(step_pages)});")
            time.sleep(pause_s)
        conn.execute("PRAGMA wal_checkpoint(PASSIVE)")  # takes no lock a writer needs
        # Truncating the log needs the write lock and no reader behind: tried briefly, never
        # waited for (otherwise the log shrinks to `journal_size_limit` at its next reset).
        conn.execute(f"PRAGMA busy_timeout = {int(TRUNCATE_WAIT_S * 1000)}")
        try:
            conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        finally:
            conn.execute(f"PRAGMA busy_timeout = {int(self._busy_timeout_s * 1000)}")
        return returned

    def size_bytes(self) -> int:
        """The database file plus its write-ahead log."""
        wal = Path(f"{self.path}-wal")
        return self.path.stat().st_size + (wal.stat().st_size if wal.exists() else 0)

    def export_csv(self, table: str, out: str | Path, **filters: Any) -> int:
        """Write `table` (runs or actions) for the filters to a CSV file; return the row count
        (counted as rows, not lines: commands and messages may hold newlines)."""
        if table not in ("runs", "actions"):  # before the file is created
            raise StoreError(f"unknown table {table!r} (choose runs or actions)")
        rows = 0
        secrets = redaction.held()  # rows written before a secret was known are scrubbed here
        with open(out, "w", newline="") as handle:
            for first, frame in self._export_frames(table, 50_000, filters):
                handle.write(_scrubbed(frame, secrets).to_csv(index=False, header=first))
                rows += len(frame)
        return rows

    def _frame(self, sql: str, params: list[Any]) -> pd.DataFrame:
        # from_records over fetchall is about 1.5x faster than pd.read_sql_query here, and
        # the dashboard reads up to 100,000 runs per page.
        cursor = self.db.conn.execute(sql, params)
        columns = [d[0] for d in cursor.description]
        return pd.DataFrame.from_records(cursor.fetchall(), columns=columns)


def _scrubbed(frame: pd.DataFrame, secrets: list[str]) -> pd.DataFrame:
    """`frame` with every secret in its text columns replaced (`rtax.core.redaction.MASK`)."""
    if secrets:
        for column in frame.select_dtypes(include=["object", "string"]).columns:
            frame[column] = frame[column].map(
                lambda v: redaction.scrub(v, secrets) if isinstance(v, str) else v
            )
    return frame


#: The run's context on every action row read or exported (rtax.core.record.ACTION_CONTEXT).
_ACTION_CONTEXT = ", ".join(
    f"r.{column}" if column == name else f"r.{column} AS {name}" for column, name in ACTION_CONTEXT
)
