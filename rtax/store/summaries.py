"""The store's per-series summaries (rtax.analysis.summaries): part of `rtax.store.database.Store`, kept apart.

Why here (docs/data.md#summaries): the store owns all SQL, and `Store` would pass its size;
this is a mixin of `Store` (its connection, its transactions, `_frame` and `runs`), never used
alone. `Store.save_rollout` writes a run's summary rows through `_add_summaries` in the
transaction that saves the run, so the raw samples and the summaries never disagree.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pandas as pd

from rtax.analysis import summaries
from rtax.store.incidents import SERIES_COLUMNS
from rtax.store.migrations import build_summaries
from rtax.store.sql import RUN_FILTERS, insert, where

#: The summaries table's primary key.
PRIMARY_KEY = ("substrate", "mode", "fidelity", "vantage", "launch_type", "tier", "steps")
PRIMARY_KEY = (*PRIMARY_KEY, "toolchain")
PRIMARY_KEY = (*PRIMARY_KEY, "bucket")
PRIMARY_KEY = (*PRIMARY_KEY, "bucket_start", "metric")


class SummaryStore:
    """Per-series summaries, written with each run and read by the pages (mixed into
    `rtax.store.database.Store`)."""

    db: Any

    def _transaction(self) -> Any:  # pragma: no cover - provided by Store
        raise NotImplementedError

    def _frame(self, sql: str, params: list[Any]) -> pd.DataFrame:  # pragma: no cover
        raise NotImplementedError

    def runs(self, **kwargs: Any) -> pd.DataFrame:  # pragma: no cover - provided by Store
        raise NotImplementedError

    def _add_summaries(self, rows: Sequence[dict[str, Any]]) -> None:
        """Merge summary rows into the table (inside the caller's transaction)."""
        conn = self.db.conn
        where = " AND ".join(f"[{k}] = ?" for k in PRIMARY_KEY)
        for row in rows:
            cursor = conn.execute(
                f"SELECT * FROM summaries WHERE {where}", [row[k] for k in PRIMARY_KEY]
            )
            found = cursor.fetchone()
            if found is not None:
                old = dict(zip([d[0] for d in cursor.description], found, strict=True))
                row = summaries.merge_row(old, row)
            conn.execute(
                insert("summaries", summaries.COLUMNS, "INSERT OR REPLACE"),
                [row.get(c) for c in summaries.COLUMNS],
            )

    def rebuild_summaries(self) -> int:
        """Rewrite the summaries from the raw runs and the rollups (repair, or after rows were
        written around `save_rollout`, as the synthetic benchmark does); one transaction."""
        with self._transaction():
            return build_summaries(self.db)

    def summaries(
        self, *, metrics: Sequence[str] | None = None, since: str | None = None, **filters: Any
    ) -> pd.DataFrame:
        """Summary rows (rtax.analysis.summaries) for the filters and a window from `since` (all time if
        None): whole days from the day rows, the whole hours before the first whole day from
        the hour rows, and the part before the first whole hour summarized from the raw runs
        started in it (an indexed slice of at most an hour), so the answer covers exactly the
        window where raw samples remain. Folded history counts by bucket start, as
        `rtax.store.retention.window` does."""
        clause, params = where(filters, prefix="", allowed=RUN_FILTERS)
        base = [clause.removeprefix("WHERE ")] if clause else []
        if metrics is not None:
            base.append(f"metric IN ({', '.join('?' for _ in metrics)})")
            params.extend(metrics)
        day = summaries.next_start(str(since), "day") if since is not None else None
        hour = summaries.next_start(str(since), "hour") if since is not None else None
        parts = [("day", day, None)]
        if since is not None and hour < day:
            parts.append(("hour", hour, day))
        frames = []
        for bucket, start, end in parts:
            clauses = [*base, "bucket = ?"]
            extra: list[Any] = [bucket]
            for clause, value in (("bucket_start >= ?", start), ("bucket_start < ?", end)):
                if value is not None:
                    clauses.append(clause)
                    extra.append(value)
            sql = f"SELECT * FROM summaries WHERE {' AND '.join(clauses)}"
            frames.append(self._frame(sql, [*params, *extra]))
        if since is not None and str(since) < hour:
            runs = self.runs(since=since, until=hour, **filters)
            counts = self._action_rows(list(runs["run_id"])) if not runs.empty else {}
            rows = summaries.rows_of(runs.to_dict("records"), counts, buckets=("hour",))
            rows = [r for r in rows if metrics is None or r["metric"] in metrics]
            frames.append(pd.DataFrame(rows, columns=list(summaries.COLUMNS)))
        frames = [f for f in frames if not f.empty]
        if not frames:
            return pd.DataFrame(columns=list(summaries.COLUMNS))
        return frames[0] if len(frames) == 1 else pd.concat(frames, ignore_index=True)

    def _action_rows(self, run_ids: Sequence[str]) -> dict[str, int]:
        out: dict[str, int] = {}
        for start in range(0, len(run_ids), 500):
            chunk = list(run_ids[start : start + 500])
            marks = ", ".join("?" for _ in chunk)
            sql = f"SELECT run_id, count(*) FROM actions WHERE run_id IN ({marks}) GROUP BY 1"
            out.update(dict(self.db.execute(sql, chunk).fetchall()))
        return out

    def summary_distinct(self) -> dict[str, list[Any]]:
        """The values present in the grouping columns over raw and folded history alike (the
        dashboard's filters), from the summaries: no scan of runs."""
        out = {}
        for column in ("substrate", "tier", "steps", "fidelity", "mode", "vantage"):
            sql = (
                f"SELECT DISTINCT [{column}] FROM summaries WHERE metric = ? AND bucket = ? "
                "ORDER BY 1"
            )
            rows = self.db.execute(sql, ["wall_s", "day"]).fetchall()  # every run has one
            out[column] = [r[0] for r in rows if r[0] is not None]
        return out

    def summary_buckets(
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
        clauses.append(f"metric IN ({', '.join('?' for _ in metrics)})")
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

    def oldest_raw_start(self) -> str | None:
        """When the oldest raw run still kept started (None: no raw runs): retention deletes
        raw runs by age, so raw samples cover exactly the history from here on."""
        row = self.db.execute("SELECT min(started_at) FROM runs").fetchone()
        return row[0] if row else None

    def summary_span(self, since: str | None = None, **filters: Any) -> tuple[str, str] | None:
        """(the first day with a run, the newest run's start) for the filters, over raw and
        folded history alike (None: no run), from the day rows: how much history a timeline
        has to show."""
        clause, params = where(filters, prefix="", allowed=RUN_FILTERS)
        clauses = [clause.removeprefix("WHERE ")] if clause else []
        clauses += ["metric = ?", "bucket = ?"]
        params += ["wall_s", "day"]
        if since is not None:
            clauses.append("bucket_start >= ?")
            params.append(summaries.start_of(str(since), "day"))
        sql = (
            "SELECT min(bucket_start), max(last_started_at) FROM summaries "
            f"WHERE {' AND '.join(clauses)}"
        )
        first, last = self.db.execute(sql, params).fetchone()
        return (first, last) if first is not None else None

    def summary_series(self, since: str | None = None, **filters: Any) -> pd.DataFrame:
        """The series (`SERIES_COLUMNS`) with a run in the window, raw or
        folded, from the day rows: what a timeline can show, without reading its points."""
        clause, params = where(filters, prefix="", allowed=RUN_FILTERS)
        clauses = [clause.removeprefix("WHERE ")] if clause else []
        clauses += ["metric = ?", "bucket = ?"]
        params += ["wall_s", "day"]
        if since is not None:
            clauses.append("bucket_start >= ?")
            params.append(summaries.start_of(str(since), "day"))
        columns = ", ".join(SERIES_COLUMNS)
        sql = (
            f"SELECT DISTINCT {columns} FROM summaries WHERE {' AND '.join(clauses)} "
            f"ORDER BY {columns}"
        )
        return self._frame(sql, params)
