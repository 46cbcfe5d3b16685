"""The store's per-series summaries (rtax.analysis.summaries): the `Summaries` table of a `Store`.

Why a table of their own (docs/data.md#summaries): the pages read these instead of every raw
sample. `Store.save_rollout` merges a run's summary rows (`Summaries.merge`) in the transaction
that saves the run, so the raw samples and the summaries never disagree; `build` rewrites them
all from the runs and rollups (a migration that changes the table's key, or a repair).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from contextlib import AbstractContextManager
from typing import Any

import pandas as pd
import sqlite_utils

from rtax.analysis import summaries
from rtax.store.frozen import V11_VANTAGE
from rtax.store.incidents import SERIES_COLUMNS
from rtax.store.runs import Runs
from rtax.store.schema import OPTION_COLUMNS, SUMMARY_COLUMNS, SUMMARY_KEY
from rtax.store.sql import RUN_FILTERS, Table, insert, marks, where


class Summaries(Table):
    """Per-series summaries, written with each run and read by the pages. `runs`: the store's
    runs, which answer the part of a window before its first whole hour."""

    def __init__(
        self,
        db: sqlite_utils.Database,
        transaction: Callable[[], AbstractContextManager[None]],
        runs: Runs,
    ) -> None:
        super().__init__(db, transaction)
        self.runs = runs

    def merge(self, rows: Iterable[dict[str, Any]]) -> None:
        """Merge summary rows into the table (`rtax.analysis.summaries.merge_row`), in the
        caller's transaction when one is open."""
        match = " AND ".join(f"[{k}] = ?" for k in SUMMARY_KEY)
        with self.transaction():
            for row in rows:
                old = self._rows(
                    f"SELECT * FROM summaries WHERE {match}", [row[k] for k in SUMMARY_KEY]
                )
                if old:
                    row = summaries.merge_row(old[0], row)
                self.db.conn.execute(
                    insert("summaries", SUMMARY_COLUMNS, "INSERT OR REPLACE"),
                    [row.get(c) for c in SUMMARY_COLUMNS],
                )

    def rebuild(self) -> int:
        """Rewrite the summaries from the raw runs and the rollups (repair, or after rows were
        written around `Store.save_rollout`, as the synthetic benchmark does); one transaction.
        Returns the number of rows."""
        with self.transaction():
            return build(self.db)

    def read(
        self, *, metrics: Sequence[str] | None = None, since: str | None = None, **filters: Any
    ) -> pd.DataFrame:
        """Summary rows for the filters and a window from `since` (all time if None): whole
        months from the month rows, the whole days before the first whole month from the day
        rows, the whole hours before the first whole day from the hour rows, and the part
        before the first whole hour summarized from the raw runs started in it (an indexed slice
        of at most an hour), so the answer covers exactly the window where raw samples remain,
        in at most ~12 rows a year, 30 a month and 23 a day per series and metric. Folded
        history counts by bucket start, as `rtax.store.retention.window` does."""
        clause, params = where(filters, prefix="", allowed=RUN_FILTERS)
        base = [clause.removeprefix("WHERE ")] if clause else []
        # Always a metric list: the index leads with the metric, and without one a month's
        # rows were a scan of the whole table (3 M rows at a million runs, 0.2 s a read).
        metrics = self.metrics() if metrics is None else metrics
        base.append(f"metric IN ({marks(metrics)})")
        params.extend(metrics)
        parts: list[tuple[str, str | None, str | None]] = [("month", None, None)]
        if since is not None:
            hour, day, month = (summaries.next_start(str(since), b) for b in summaries.BUCKETS)
            parts = [("month", month, None)]
            if day < month:
                parts.append(("day", day, month))
            if hour < day:
                parts.append(("hour", hour, day))
        frames = []
        for bucket, start, end in parts:  # (each `bucket_start` range is indexed)
            clauses = [*base, "bucket = ?"]
            extra: list[Any] = [bucket]
            for clause, value in (("bucket_start >= ?", start), ("bucket_start < ?", end)):
                if value is not None:
                    clauses.append(clause)
                    extra.append(value)
            sql = f"SELECT * FROM summaries WHERE {' AND '.join(clauses)}"
            frames.append(self._frame(sql, [*params, *extra]))
        if since is not None and str(since) < hour:
            frames.append(self._raw(since, hour, metrics, filters))
        frames = [f for f in frames if not f.empty]
        if not frames:
            return pd.DataFrame(columns=list(SUMMARY_COLUMNS))
        return frames[0] if len(frames) == 1 else pd.concat(frames, ignore_index=True)

    def _raw(
        self, since: str, until: str, metrics: Sequence[str] | None, filters: dict[str, Any]
    ) -> pd.DataFrame:
        """Hour rows summarized from the raw runs started in [since, until)."""
        runs = self.runs.read(since=since, until=until, **filters)
        counts = self.runs.action_counts(list(runs["run_id"])) if not runs.empty else {}
        rows = summaries.rows_of(runs.to_dict("records"), counts, buckets=("hour",))
        rows = [r for r in rows if metrics is None or r["metric"] in metrics]
        return pd.DataFrame(rows, columns=list(SUMMARY_COLUMNS))

    def metrics(self) -> list[str]:
        """Every metric the table holds, from its index in one seek per metric (a loose index
        scan: SQLite's DISTINCT would read all of the index)."""
        sql = (
            "WITH RECURSIVE m(x) AS (SELECT min(metric) FROM summaries UNION ALL "
            "SELECT (SELECT min(metric) FROM summaries WHERE metric > x) FROM m "
            "WHERE x IS NOT NULL) SELECT x FROM m WHERE x IS NOT NULL"
        )
        return [r[0] for r in self.db.execute(sql).fetchall()]

    def distinct(self) -> dict[str, list[Any]]:
        """The values present in the grouping columns over raw and folded history alike (the
        dashboard's filters), from the summaries: no scan of runs."""
        out = {}
        for column in OPTION_COLUMNS:
            sql = (
                f"SELECT DISTINCT [{column}] FROM summaries WHERE metric = ? AND bucket = ? "
                "ORDER BY 1"
            )
            rows = self.db.execute(sql, ["wall_s", "month"]).fetchall()  # every run has one
            out[column] = [r[0] for r in rows if r[0] is not None]
        return out

    def buckets(
        self,
        bucket: str,
        *,
        metrics: Sequence[str],
        since: str | None = None,
        until: str | None = None,
        **filters: Any,
    ) -> pd.DataFrame:
        """The summary rows of one granularity (``hour`` or ``day``) whose bucket starts in
        [`since`, `until`), for the filters: a timeline's points, raw and folded history
        alike. `since` is rounded down to its bucket's start, so the first bucket is whole."""
        if bucket not in summaries.BUCKETS:
            raise ValueError(f"bucket must be one of {', '.join(summaries.BUCKETS)}")
        clause, params = where(filters, prefix="", allowed=RUN_FILTERS)
        clauses = [clause.removeprefix("WHERE ")] if clause else []
        clauses.append(f"metric IN ({marks(metrics)})")
        params.extend(metrics)
        clauses.append("bucket = ?")
        params.append(bucket)
        if since is not None:
            clauses.append("bucket_start >= ?")
            params.append(summaries.start_of(str(since), bucket))
        if until is not None:
            clauses.append("bucket_start < ?")
            params.append(str(until))
        sql = f"SELECT * FROM summaries WHERE {' AND '.join(clauses)} ORDER BY bucket_start"
        return self._frame(sql, params)

    def span(self, since: str | None = None, **filters: Any) -> tuple[str, str] | None:
        """(the first day with a run, the newest run's start) for the filters, over raw and
        folded history alike (None: no run), from the day rows: how much history a timeline
        has to show."""
        clauses, params = self._days(since, filters)
        sql = (
            "SELECT min(bucket_start), max(last_started_at) FROM summaries "
            f"WHERE {' AND '.join(clauses)}"
        )
        first, last = self._one(sql, params) or (None, None)
        return (first, last) if first is not None else None

    def series(self, since: str | None = None, **filters: Any) -> pd.DataFrame:
        """The series (`SERIES_COLUMNS`) with a run in the window, raw or folded, from the day
        rows: what a timeline can show, without reading its points."""
        clauses, params = self._days(since, filters)
        columns = ", ".join(SERIES_COLUMNS)
        sql = (
            f"SELECT DISTINCT {columns} FROM summaries WHERE {' AND '.join(clauses)} "
            f"ORDER BY {columns}"
        )
        return self._frame(sql, params)

    def _days(self, since: str | None, filters: dict[str, Any]) -> tuple[list[str], list[Any]]:
        """The WHERE clauses (and their parameters) of the day rows of ``wall_s`` (every run
        has one) for the filters, from the day `since` falls in."""
        clause, params = where(filters, prefix="", allowed=RUN_FILTERS)
        clauses = [clause.removeprefix("WHERE ")] if clause else []
        clauses += ["metric = ?", "bucket = ?"]
        params += ["wall_s", "day"]
        if since is not None:
            clauses.append("bucket_start >= ?")
            params.append(summaries.start_of(str(since), "day"))
        return clauses, params


def build(db: sqlite_utils.Database, chunk_runs: int = 20_000) -> int:
    """(Re)write every summary row from the raw runs (with their action-row counts) and the
    rollups of folded history; return the number of rows. Used by the migrations that change
    the table (`rtax.store.migrations`) and by `Summaries.rebuild` (repair). Folded history
    keeps what its rollups kept: no toolchain (unknown), milestones, sums of squares,
    resolution or action-row counts."""
    conn = db.conn
    # The table as it is at this version (`_v8` builds before `_v11` added vantage, whose rows
    # are then all `local`, as their runs are).
    present = {c.name for c in db["summaries"].columns}
    key = [k for k in SUMMARY_KEY if k in present]
    conn.execute("DELETE FROM summaries")
    action_rows = dict(conn.execute("SELECT run_id, count(*) FROM actions GROUP BY run_id"))
    merged: dict[tuple, dict] = {}

    def add(rows: Iterable[dict]) -> None:
        for row in rows:
            found = tuple(row[k] for k in key)
            old = merged.get(found)
            merged[found] = summaries.merge_row(old, row) if old else row

    # A run with no start time (only hand-made rows lack one) falls in no bucket, as it falls
    # in no time window of the raw rows either.
    cursor = conn.execute("SELECT * FROM runs WHERE started_at IS NOT NULL ORDER BY started_at")
    names = [d[0] for d in cursor.description]
    while chunk := cursor.fetchmany(chunk_runs):
        add(summaries.rows_of((dict(zip(names, r, strict=True)) for r in chunk), action_rows))
    cursor = conn.execute(
        f"SELECT * FROM rollups WHERE metric IN ({marks(summaries.RUN_METRICS)})",
        list(summaries.RUN_METRICS),
    )
    names = [d[0] for d in cursor.description]
    add(
        row
        for values in cursor.fetchall()
        for row in _of_rollup(dict(zip(names, values, strict=True)))
    )
    columns = [c for c in SUMMARY_COLUMNS if c in present]
    conn.executemany(
        insert("summaries", columns), ([row.get(c) for c in columns] for row in merged.values())
    )
    return len(merged)


def build_months(db: sqlite_utils.Database) -> int:
    """(Re)write the month rows from the day rows, a month at a time (so memory holds one
    month of day rows); return the number of month rows. The migration that added month rows
    (`rtax.store.migrations`) runs it: merging a month's day rows gives what merging its runs
    one by one gives (`rtax.analysis.summaries.regroup`), without reading a million runs again."""
    conn = db.conn
    conn.execute("DELETE FROM summaries WHERE bucket = 'month'")
    starts = [
        summaries.start_of(r[0], "month")
        for r in conn.execute(
            "SELECT DISTINCT substr(bucket_start, 1, 7) || '-01T00:00:00+00:00' FROM summaries "
            "WHERE bucket = 'day' ORDER BY 1"
        )
    ]
    present = [c.name for c in db["summaries"].columns]
    written = 0
    for start in starts:
        cursor = conn.execute(
            "SELECT * FROM summaries WHERE bucket = 'day' AND bucket_start >= ? "
            "AND bucket_start < ?",
            [start, summaries.following(start, "month")],
        )
        names = [d[0] for d in cursor.description]
        days = pd.DataFrame(cursor.fetchall(), columns=names)
        months = summaries.regroup(days, "month")
        conn.executemany(
            insert("summaries", present),
            ([row.get(c) for c in present] for row in months.to_dict("records")),
        )
        written += len(months)
    return written


def _of_rollup(r: dict[str, Any]) -> list[dict[str, Any]]:
    """The summary rows (an hour's, a day's and a month's) of one rollup row."""
    out = []
    for bucket in summaries.BUCKETS:
        out.append(
            {
                **{k: r[k] for k in ("substrate", "kind", "mode", "fidelity", "tier")},
                "launch_type": r.get("launch_type") or "cold",  # before v10: all cold
                "vantage": r.get("vantage") or V11_VANTAGE,
                "steps": r["steps"],
                "toolchain": "",
                "bucket": bucket,
                # a day's rollup lands at its day's start in the hour rows too
                "bucket_start": summaries.start_of(r["bucket_start"], bucket),
                "metric": r["metric"],
                **{k: r[k] for k in ("runs", "n", "sum", "min", "max", "sketch", "errors")},
                "sumsq": None,
                "res_max": None,
                "last_started_at": r["bucket_start"],
            }
        )
    return out
