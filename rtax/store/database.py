"""The store: every raw sample in one SQLite file, and the tables that hold it as objects.

Why SQLite and raw samples (docs/data.md): percentiles must be computed from the samples of the
window in view; a single file is what an embedded default needs. Beside them the store keeps
per-series hourly summaries (rtax.analysis.summaries), written in the transaction that saves each
run, so the dashboard's first paint never scans every sample; raw samples stay the source of
truth.

A `Store` is the file's life cycle (open, migrate, transactions, compaction, size) and holds one
object per table, each with the store's connection and transactions (sqlite-utils' habit:
``db["runs"]`` is a table its database holds):

- ``store.runs``: one row per rollout and one per command of it (`rtax.store.runs`).
- ``store.summaries``: per-series hourly and daily summaries (`rtax.store.summaries`).
- ``store.incidents``: changes and rule breaches per series, with their alerts
  (`rtax.store.incidents`).
- ``store.loads``: one row per sequential, staggered or burst load run (`rtax.store.loads`).
- ``store.rollups``: what retention keeps of folded history (`rtax.store.rollups`).
- ``store.maintenance``: maintenance windows added at run time (`rtax.store.maintenance`).
- ``store.snapshots``: the snapshots the restore paths made (`rtax.store.snapshots`).

What spans tables is the store's own: `Store.save_rollout` (a run, its actions and its
summaries) and `Store.fold_runs` (rollups written, their runs deleted), one transaction each.
WAL mode, so the dashboard reads while the scheduler writes. The schema version is SQLite's
``user_version``; `rtax.store.migrations` upgrades older files in order, and a file newer than
this rtax is refused rather than misread. The columns of every table are `rtax.store.schema`'s.
"""

from __future__ import annotations

import os
import sqlite3
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import sqlite_utils

from rtax.analysis import summaries
from rtax.core.record import RolloutRecord
from rtax.store.incidents import Incidents
from rtax.store.loads import LoadRuns
from rtax.store.maintenance import Maintenance
from rtax.store.migrations import MIGRATIONS, SCHEMA_VERSION
from rtax.store.rollups import Rollups
from rtax.store.runs import Runs
from rtax.store.snapshots import Snapshots
from rtax.store.sql import StoreError
from rtax.store.summaries import Summaries

__all__ = ["BUSY_TIMEOUT_S", "Store", "StoreError", "default_busy_timeout_s"]

#: How long a writer waits for another's write lock before "database is locked" (SQLite's busy
#: timeout). Maintenance (`Store.compact`, `rtax.store.retention`) holds the lock far less than
#: this.
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


class Store:
    """One SQLite database of rtax samples, with its tables (`runs`, `summaries`,
    `incidents`, `loads`, `rollups`, `maintenance`). Open one per thread (sqlite's rule)."""

    runs: Runs
    summaries: Summaries
    incidents: Incidents
    loads: LoadRuns
    rollups: Rollups
    maintenance: Maintenance
    snapshots: Snapshots

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
        # Autocommit mode: transactions are explicit (`transaction`), because Python's sqlite3
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
            self._tables()
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

    def _tables(self) -> None:
        """The store's table objects, each with this connection and `transaction`."""
        self.runs = Runs(self.db, self.transaction)
        self.summaries = Summaries(self.db, self.transaction, self.runs)
        self.incidents = Incidents(self.db, self.transaction)
        self.loads = LoadRuns(self.db, self.transaction)
        self.rollups = Rollups(self.db, self.transaction)
        self.maintenance = Maintenance(self.db, self.transaction)
        self.snapshots = Snapshots(self.db, self.transaction)

    @property
    def version(self) -> int:
        return int(self.db.execute("PRAGMA user_version").fetchone()[0])

    def migrate(self) -> list[int]:
        """Apply pending migrations, each in its own transaction; return the versions applied."""
        applied = []
        for version, migration in MIGRATIONS:
            if version <= self.version:
                continue
            with self.transaction():
                migration(self.db)
                self.db.execute(f"PRAGMA user_version = {int(version)}")
            applied.append(version)
        return applied

    @contextmanager
    def transaction(self) -> Iterator[None]:
        """BEGIN IMMEDIATE ... COMMIT, or ROLLBACK on any exception (Ctrl-C included). Inside
        an open transaction it joins that one: a table's write within `save_rollout` or
        `fold_runs` commits or rolls back with the rest."""
        conn = self.db.conn
        if conn.in_transaction:
            yield
            return
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

    # -- what spans tables ----------------------------------------------------------------

    def save_rollout(self, record: RolloutRecord) -> None:
        """Write a run, all its actions and its summary rows in one transaction (all or
        nothing)."""
        try:
            with self.transaction():
                run = self.runs.insert(record)
                self.summaries.merge(
                    summaries.rows_of([run], {run.get("run_id"): len(record.actions)})
                )
        except sqlite3.Error as exc:
            raise StoreError(f"cannot save run {record.run.get('run_id')}: {exc}") from exc

    def fold_runs(self, rollups: Sequence[dict[str, Any]], run_ids: Sequence[str]) -> None:
        """In one transaction: write the (already merged) rollup rows, then delete the runs they
        summarize and their actions. Either all of it happens or none."""
        with self.transaction():
            self.rollups.write(rollups)
            self.runs.delete(run_ids)

    # -- maintenance ---------------------------------------------------------------------------

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
