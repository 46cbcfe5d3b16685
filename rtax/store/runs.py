"""The store's runs and their actions: the `Runs` table of a `Store` (docs/data.md).

Why runs and actions are one object: an action is never read without its run (its series, its
window and its filters are the run's), and both are written together, one rollout per
transaction (`Store.save_rollout`). The columns are `rtax.core.record`'s fields, in their order.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from rtax.analysis.slo import Counts, Objective
from rtax.core import redaction
from rtax.core.failures import OWN_ERRORS
from rtax.core.record import ACTION_CONTEXT, LOCAL_VANTAGE, RolloutRecord
from rtax.store.incidents import SERIES_COLUMNS
from rtax.store.schema import ACTION_COLUMNS, OPTION_COLUMNS, RUN_COLUMNS
from rtax.store.sql import RUN_FILTERS, StoreError, Table, chunks, insert, marks, select
from rtax.store.sql import limit as _limit
from rtax.store.sql import where as _where

#: The tables `csv_chunks` and `export_csv` write.
EXPORTS = ("runs", "actions")


class Runs(Table):
    """Every rollout (``runs``) and every command of it (``actions``)."""

    # -- writing -------------------------------------------------------------------------------

    def insert(self, record: RolloutRecord) -> dict[str, Any]:
        """Write a run and all its actions, in the caller's transaction when one is open (else
        in one of their own); return the run row as written (with the defaults of a record
        older than its columns)."""
        run = {
            **record.run,
            "mode": record.run.get("mode") or "exec",
            # a record made before launch types (a spool line of an older rtax) was cold
            "launch_type": record.run.get("launch_type") or "cold",
            "vantage": record.run.get("vantage") or LOCAL_VANTAGE,
        }
        with self.transaction():
            self.db.conn.execute(insert("runs", RUN_COLUMNS), [run.get(c) for c in RUN_COLUMNS])
            self.db.conn.executemany(
                insert("actions", ACTION_COLUMNS),
                ([row.get(c) for c in ACTION_COLUMNS] for row in record.actions),
            )
        return run

    def delete(self, run_ids: Sequence[str]) -> None:
        """Delete runs and their actions, in the caller's transaction when one is open."""
        with self.transaction():
            for chunk in chunks(run_ids):
                self.db.conn.execute(f"DELETE FROM actions WHERE run_id IN ({marks(chunk)})", chunk)
                self.db.conn.execute(f"DELETE FROM runs WHERE run_id IN ({marks(chunk)})", chunk)

    # -- reading -------------------------------------------------------------------------------

    def read(
        self,
        *,
        columns: Sequence[str] | None = None,
        limit: int | None = None,
        newest_first: bool = False,
        **filters: Any,
    ) -> pd.DataFrame:
        """Runs matching the filters (`rtax.store.sql.where`), oldest first unless
        `newest_first`. `columns` picks a subset (the dashboard skips the bulky provenance
        JSON); `limit` caps the rows."""
        columns_sql = select(columns, RUN_COLUMNS)
        where, params = _where(filters, prefix="", allowed=RUN_FILTERS)
        order = "DESC" if newest_first else "ASC"
        sql = f"SELECT {columns_sql} FROM runs {where} ORDER BY started_at {order}, run_id {order}"
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
        order = "DESC" if newest_first else "ASC"
        runs_where, params = _where(filters, prefix="", allowed=RUN_FILTERS)
        runs_sql = f"SELECT * FROM runs {runs_where} ORDER BY started_at {order}, run_id {order}"
        runs_sql += _limit(limit, params)
        phase_where = ""
        if phase is not None:
            phase_where, phase_params = _where(
                {"_phase": phase}, prefix="", allowed=frozenset({"_phase"})
            )
            params.extend(phase_params)
        sql = (
            f"SELECT a.*, {_ACTION_CONTEXT} FROM ({runs_sql}) r "
            f"JOIN actions a ON a.run_id = r.run_id {phase_where} "
            f"ORDER BY r.started_at {order}, a.run_id {order}, a.seq"
        )
        return self._frame(sql + _limit(limit, params), params)

    def count(self, **filters: Any) -> int:
        """How many runs match the filters."""
        where, params = _where(filters, prefix="", allowed=RUN_FILTERS)
        return int(self._one(f"SELECT count(*) FROM runs {where}", params)[0])

    def count_actions(self, **filters: Any) -> int:
        """How many action rows the runs matching the filters hold."""
        if not filters:
            return int(self._one("SELECT count(*) FROM actions")[0])
        where, params = _where(filters, prefix="r.", allowed=RUN_FILTERS)
        sql = f"SELECT count(*) FROM actions a JOIN runs r ON r.run_id = a.run_id {where}"
        return int(self._one(sql, params)[0])

    def spend(self, **filters: Any) -> pd.DataFrame:
        """Per substrate and fidelity: rollouts started and environment-minutes used.

        Why wall time: an environment is billed from the create request until it is deleted,
        and a run's wall time spans exactly that (create through verified cleanup); a rollout
        that never got an environment (no wall time) costs nothing. Budgets
        (docs/configuration.md#budgets) are checked against this, per substrate name, since
        midnight UTC."""
        where, params = _where(filters, prefix="", allowed=RUN_FILTERS)
        sql = (
            "SELECT substrate, fidelity, count(*) AS rollouts, "
            "coalesce(sum(wall_s), 0) / 60.0 AS env_minutes "
            f"FROM runs {where} GROUP BY substrate, fidelity ORDER BY substrate, fidelity"
        )
        return pd.read_sql_query(sql, self.db.conn, params=params)

    def floor_toolchain(self) -> str | None:
        """The toolchain digest of the newest successful real `local` run: the floor that
        other series are comparable to (docs/toolchain.md)."""
        row = self._one(
            "SELECT toolchain FROM runs WHERE kind = 'local' AND fidelity = 'real' "
            "AND status = 'ok' AND toolchain IS NOT NULL ORDER BY started_at DESC LIMIT 1"
        )
        return row[0] if row else None

    def distinct(self) -> dict[str, list[Any]]:
        """The values present in the grouping columns of runs (for the dashboard's filters)."""
        out = {}
        for column in OPTION_COLUMNS:
            rows = self.db.execute(f"SELECT DISTINCT [{column}] FROM runs ORDER BY 1").fetchall()
            out[column] = [r[0] for r in rows if r[0] is not None]
        return out

    def milestone_means(self, **filters: Any) -> pd.DataFrame:
        """Mean offset (s from the create or claim request) and n of each native milestone of
        successful runs, per substrate, mode, fidelity, launch type, vantage, tier and
        steps."""
        filters = {**filters, "status": "ok"}
        where, params = _where(filters, prefix="r.", allowed=RUN_FILTERS)
        sql = (
            "SELECT r.substrate, r.mode, r.fidelity, r.launch_type, r.vantage, r.tier, r.steps, "
            "json_extract(m.value, '$.name') AS milestone, "
            "avg(json_extract(m.value, '$.t_s')) AS mean_t_s, count(*) AS n "
            f"FROM runs r, json_each(r.milestones) m {where} "
            "GROUP BY 1, 2, 3, 4, 5, 6, 7 ORDER BY 1, 2, 3, 4, 5, 6, 8"
        )
        return self._frame(sql, params)

    def idle_memory(self, **filters: Any) -> pd.DataFrame:
        """Per run handed over by a pool (warm, resume) whose kind says what an environment
        holds (`rtax.substrates.base.Weighs`): its substrate, launch type and
        ``memory_bytes``, measured once the environment was made and while it waited
        (provenance ``pool.memory_bytes``): what a pool of that path holds per environment."""
        where, params = _where(filters, prefix="", allowed=RUN_FILTERS)
        clause = f"{where} AND" if where else "WHERE"
        return self._frame(
            "SELECT substrate, launch_type, memory_bytes FROM (SELECT substrate, launch_type, "
            "json_extract(provenance, '$.pool.memory_bytes') AS memory_bytes, started_at, "
            f"run_id FROM runs {clause} launch_type IN ('warm', 'resume')) "
            "WHERE memory_bytes IS NOT NULL ORDER BY started_at, run_id",
            params,
        )

    def series_seen(self, since: str) -> pd.DataFrame:
        """Each series (`SERIES_COLUMNS`) probed since `since`, with its newest ``started_at``
        (``last``) and that of its newest rollout that reached the substrate, rtax's own
        errors left out (``last_reached``, NULL when none did since `since`): what a
        detection pass and the status board look at."""
        columns = ", ".join(SERIES_COLUMNS)
        own = marks(OWN_ERRORS)
        return self._frame(
            f"SELECT {columns}, max(started_at) AS last, max(CASE WHEN coalesce(error_class, '') "
            f"NOT IN ({own}) THEN started_at END) AS last_reached FROM runs "
            f"WHERE started_at >= ? GROUP BY {columns} ORDER BY {columns}",
            [*OWN_ERRORS, since],
        )

    def last_reached(self, since: str | None = None, **series: Any) -> str | None:
        """When the newest run of the filters (one series' dimensions) since `since` that
        reached the substrate started, rtax's own errors left out (None: none did): a status
        card's evidence once its newest runs are all rtax's own errors. Walks the runs index
        (substrate, tier, steps, started_at) from the newest down to the first such run."""
        where, params = _where({**series, "since": since}, prefix="", allowed=RUN_FILTERS)
        clause = f"{where} AND" if where else "WHERE"
        row = self._one(
            f"SELECT started_at FROM runs {clause} coalesce(error_class, '') NOT IN "
            f"({marks(OWN_ERRORS)}) ORDER BY started_at DESC LIMIT 1",
            [*params, *OWN_ERRORS],
        )
        return row[0] if row else None

    def slo_counts(
        self, objective: Objective, sinces: Sequence[str], **series: Any
    ) -> list[Counts]:
        """The SLI events of `objective` (`rtax.analysis.slo`: rtax's own errors are none, a
        latency's are its successful runs, good at or below the threshold) among the runs of
        one series (its dimensions as `series` filters) that started since each of `sinces`,
        in their order: one read of the runs index (substrate, tier, steps, started_at) from
        the oldest of them, however many spans (the period, each alert window)."""
        sinces = [str(s) for s in sinces]
        if not sinces:
            return []
        if objective.is_latency:
            column = select([str(objective.column)], RUN_COLUMNS)  # checked, bracketed
            event, event_params = f"status = 'ok' AND {column} > 0", []
            good, good_params = f"{column} <= ?", [float(objective.threshold_s or 0.0)]
        else:
            event = f"(error_class IS NULL OR error_class NOT IN ({marks(OWN_ERRORS)}))"
            event_params, good, good_params = list(OWN_ERRORS), "status = 'ok'", []
        parts, params = [], []
        for since in sinces:
            parts.append("coalesce(sum(started_at >= ?), 0)")
            parts.append(f"coalesce(sum(started_at >= ? AND {good}), 0)")
            params.extend([since, since, *good_params])
        where, where_params = _where(
            {**series, "since": min(sinces)}, prefix="", allowed=RUN_FILTERS
        )
        sql = f"SELECT {', '.join(parts)} FROM runs {where} AND {event}"
        row = self._one(sql, [*params, *where_params, *event_params]) or ()
        return [Counts(int(row[2 * i]), int(row[2 * i + 1])) for i in range(len(sinces))]

    def oldest_start(self) -> str | None:
        """When the oldest raw run still kept started (None: no raw runs): retention deletes
        raw runs by age, so raw samples cover exactly the history from here on."""
        row = self._one("SELECT min(started_at) FROM runs")
        return row[0] if row else None

    def action_latencies(self, run_ids: Sequence[str]) -> pd.DataFrame:
        """(run_id, latency_s) of the `action` rows of the given runs."""
        if not run_ids:
            return pd.DataFrame(columns=["run_id", "latency_s"])
        return self._frame(
            "SELECT run_id, latency_s FROM actions WHERE phase = 'action' "
            f"AND run_id IN ({marks(run_ids)})",
            list(run_ids),
        )

    def action_counts(self, run_ids: Sequence[str]) -> dict[str, int]:
        """run_id -> its number of action rows (runs without any are left out)."""
        out: dict[str, int] = {}
        for chunk in chunks(run_ids):
            sql = (
                f"SELECT run_id, count(*) FROM actions WHERE run_id IN ({marks(chunk)}) GROUP BY 1"
            )
            out.update(dict(self.db.execute(sql, chunk).fetchall()))
        return out

    # -- exports -------------------------------------------------------------------------------

    def csv_chunks(self, table: str, chunk_rows: int = 50_000, **filters: Any) -> Iterator[str]:
        """`table` (runs or actions) for the filters as CSV text, chunk by chunk (memory stays
        bounded)."""
        for first, frame in self._export_frames(table, chunk_rows, filters):
            yield frame.to_csv(index=False, header=first)

    def export_csv(self, table: str, out: str | Path, **filters: Any) -> int:
        """Write `table` (runs or actions) for the filters to a CSV file; return the row count
        (counted as rows, not lines: commands and messages may hold newlines)."""
        if table not in EXPORTS:  # before the file is created
            raise StoreError(f"unknown table {table!r} (choose runs or actions)")
        rows = 0
        secrets = redaction.held()  # rows written before a secret was known are scrubbed here
        with open(out, "w", newline="") as handle:
            for first, frame in self._export_frames(table, 50_000, filters):
                handle.write(_scrubbed(frame, secrets).to_csv(index=False, header=first))
                rows += len(frame)
        return rows

    def _export_frames(
        self, table: str, chunk_rows: int, filters: dict[str, Any]
    ) -> Iterator[tuple[bool, pd.DataFrame]]:
        """(is the first chunk, rows) of `table` for the filters; at least one, maybe empty,
        chunk, so that a CSV always has its header."""
        if table == "runs":
            where, params = _where(filters, prefix="", allowed=RUN_FILTERS)
            sql = f"SELECT * FROM runs {where} ORDER BY started_at, run_id"
            columns = list(RUN_COLUMNS)
        elif table == "actions":
            where, params = _where(filters, prefix="r.", allowed=RUN_FILTERS)
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
