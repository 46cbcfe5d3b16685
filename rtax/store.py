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


#: Per phase, the poll gap at which its end was detected (README.md#resolution); NULL where
#: nothing was polled. Added by `_v5`.
RESOLUTION_COLUMNS: tuple[str, ...] = tuple(f"{p}_res_s" for p in PHASES)
#: Every column of runs, in order, as of the latest schema.
RUN_COLUMNS_ALL: tuple[str, ...] = (
    *RUN_COLUMNS,
    "mode",
    "plan",
    "scheduled_at",
    *RESOLUTION_COLUMNS,
    "toolchain",
)
#: Every column of actions, in order, as of the latest schema.
ACTION_COLUMNS_ALL: tuple[str, ...] = (*ACTION_COLUMNS, "resolution_s")


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


def _v3(db: sqlite_utils.Database) -> None:
    """Which scheduler plan made a run and when it was due (scheduler lag = started_at minus
    scheduled_at)."""
    db.execute("ALTER TABLE [runs] ADD COLUMN [plan] TEXT")
    db.execute("ALTER TABLE [runs] ADD COLUMN [scheduled_at] TEXT")


def _v4(db: sqlite_utils.Database) -> None:
    """Rollups: what retention keeps of raw samples it deletes (counts, sums, extremes and a
    quantile sketch per group, time bucket and metric; README.md#retention)."""
    db.execute(
        "CREATE TABLE [rollups] ([substrate] TEXT NOT NULL, [kind] TEXT, [mode] TEXT NOT NULL, "
        "[fidelity] TEXT NOT NULL, [tier] TEXT NOT NULL, [steps] INTEGER NOT NULL, "
        "[bucket] TEXT NOT NULL, [bucket_start] TEXT NOT NULL, [metric] TEXT NOT NULL, "
        "[runs] INTEGER NOT NULL, [n] INTEGER NOT NULL, [sum] REAL, [min] REAL, [max] REAL, "
        "[sketch] TEXT, [errors] TEXT, PRIMARY KEY ([substrate], [mode], [fidelity], [tier], "
        "[steps], [bucket], [bucket_start], [metric]))"
    )
    db.execute("CREATE INDEX [idx_rollups_bucket_start] ON [rollups] ([bucket_start])")


def _v5(db: sqlite_utils.Database) -> None:
    """Resolution (README.md#resolution): per phase on runs, per command on actions. Older
    rows keep NULL: their polling (an exponential back-off) was not recorded."""
    for column in RESOLUTION_COLUMNS:
        db.execute(f"ALTER TABLE [runs] ADD COLUMN [{column}] REAL")
    db.execute("ALTER TABLE [actions] ADD COLUMN [resolution_s] REAL")


def _v6(db: sqlite_utils.Database) -> None:
    """The workload toolchain's digest on every run (README.md#the-workload-toolchain), so that
    a series whose toolchain differs from the local floor's can be told apart; older rows have
    none (unknown)."""
    db.execute("ALTER TABLE [runs] ADD COLUMN [toolchain] TEXT")


#: (version, migration), applied in order to files whose user_version is lower.
MIGRATIONS: tuple[tuple[int, Callable[[sqlite_utils.Database], None]], ...] = (
    (1, _v1),
    (2, _v2),
    (3, _v3),
    (4, _v4),
    (5, _v5),
    (6, _v6),
)
ROLLUP_COLUMNS = (
    "substrate",
    "kind",
    "mode",
    "fidelity",
    "tier",
    "steps",
    "bucket",
    "bucket_start",
    "metric",
    "runs",
    "n",
    "sum",
    "min",
    "max",
    "sketch",
    "errors",
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
        run_cols = list(RUN_COLUMNS_ALL)
        run_sql = (
            f"INSERT INTO runs ({', '.join(run_cols)}) VALUES ({', '.join('?' for _ in run_cols)})"
        )
        act_cols = list(ACTION_COLUMNS_ALL)
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
        select = _select(columns, RUN_COLUMNS_ALL, "")
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
        that never got an environment (no wall time) costs nothing. Budgets (README.md#budgets)
        are checked against this, per substrate name, since midnight UTC."""
        where, params = _where(filters, prefix="", allowed=_RUN_FILTERS)
        sql = (
            "SELECT substrate, fidelity, count(*) AS rollouts, "
            "coalesce(sum(wall_s), 0) / 60.0 AS env_minutes "
            f"FROM runs {where} GROUP BY substrate, fidelity ORDER BY substrate, fidelity"
        )
        return pd.read_sql_query(sql, self.db.conn, params=params)

    def floor_toolchain(self) -> str | None:
        """The toolchain digest of the newest successful real `local` run: the floor that
        other series are comparable to (README.md#the-workload-toolchain)."""
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
        for column in ("substrate", "tier", "steps", "fidelity", "mode"):
            rows = self.db.execute(f"SELECT DISTINCT [{column}] FROM runs ORDER BY 1").fetchall()
            out[column] = [r[0] for r in rows if r[0] is not None]
        return out

    def milestone_means(self, **filters: Any) -> pd.DataFrame:
        """Mean offset (s from the create request) and n of each native milestone of successful
        runs, per substrate, mode, fidelity, tier and steps."""
        filters = {**filters, "status": "ok"}
        where, params = _where(filters, prefix="r.", allowed=_RUN_FILTERS)
        sql = (
            "SELECT r.substrate, r.mode, r.fidelity, r.tier, r.steps, "
            "json_extract(m.value, '$.name') AS milestone, "
            "avg(json_extract(m.value, '$.t_s')) AS mean_t_s, count(*) AS n "
            f"FROM runs r, json_each(r.milestones) m {where} "
            "GROUP BY 1, 2, 3, 4, 5, 6 ORDER BY 1, 2, 3, 4, 5, 7"
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
            columns = list(RUN_COLUMNS_ALL)
        elif table == "actions":
            where, params = _where(filters, prefix="r.", allowed=_RUN_FILTERS)
            sql = (
                f"SELECT a.*, {_ACTION_CONTEXT} FROM actions a JOIN runs r ON r.run_id = a.run_id "
                f"{where} ORDER BY r.started_at, a.run_id, a.seq"
            )
            columns = [*ACTION_COLUMNS_ALL, *_CONTEXT_NAMES]
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
        cols = list(ROLLUP_COLUMNS)
        sql = (
            f"INSERT OR REPLACE INTO rollups ({', '.join(cols)}) "
            f"VALUES ({', '.join('?' for _ in cols)})"
        )
        with self._transaction():
            self.db.conn.executemany(sql, ([r.get(c) for c in cols] for r in rollups))
            for start in range(0, len(run_ids), 500):
                chunk = list(run_ids[start : start + 500])
                marks = ", ".join("?" for _ in chunk)
                self.db.conn.execute(f"DELETE FROM actions WHERE run_id IN ({marks})", chunk)
                self.db.conn.execute(f"DELETE FROM runs WHERE run_id IN ({marks})", chunk)

    def compact(self) -> None:
        """Give the space of deleted rows back to the file system (VACUUM, then truncate the
        write-ahead log)."""
        self.db.conn.execute("VACUUM")
        self.db.conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")

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
        with open(out, "w", newline="") as handle:
            for first, frame in self._export_frames(table, 50_000, filters):
                handle.write(frame.to_csv(index=False, header=first))
                rows += len(frame)
        return rows

    def _frame(self, sql: str, params: list[Any]) -> pd.DataFrame:
        # from_records over fetchall is about 1.5x faster than pd.read_sql_query here, and
        # the dashboard reads up to 100,000 runs per page.
        cursor = self.db.conn.execute(sql, params)
        columns = [d[0] for d in cursor.description]
        return pd.DataFrame.from_records(cursor.fetchall(), columns=columns)


#: The run columns that come with every action row, so an action is never out of context.
_ACTION_CONTEXT = (
    "r.substrate, r.kind, r.mode, r.tier, r.steps, r.fidelity, "
    "r.status AS run_status, r.started_at AS run_started_at"
)
_CONTEXT_NAMES = (
    "substrate",
    "kind",
    "mode",
    "tier",
    "steps",
    "fidelity",
    "run_status",
    "run_started_at",
)

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


def _select(columns: Sequence[str] | None, known: Sequence[str], prefix: str) -> str:
    if columns is None:
        return "*"
    unknown = [c for c in columns if c not in known]
    if unknown:
        raise StoreError(f"unknown column(s) {', '.join(unknown)}")
    return ", ".join(f"{prefix}[{c}]" for c in columns)


def _limit(limit: int | None, params: list[Any]) -> str:
    if limit is None:
        return ""
    params.append(int(limit))
    return " LIMIT ?"


def _is_many(value: Any) -> bool:
    return isinstance(value, Iterable) and not isinstance(value, (str, bytes))
