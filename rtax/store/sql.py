"""The store's SQL text: WHERE, INSERT, SELECT and LIMIT clauses built from checked names, and
`Table`, what every table object of the `Store` shares.

Why a module of its own: the store's tables (`rtax.store.runs`, `rtax.store.incidents`,
`rtax.store.summaries`, ...) all build queries from keyword filters; one builder means one rule
for what a filter means, and every value reaches SQLite as a bound parameter, never as text.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence, Sized
from contextlib import AbstractContextManager
from typing import Any

import pandas as pd
import sqlite_utils


class StoreError(RuntimeError):
    """The database can't be used; the message says which file and why."""


#: The runs columns a keyword filter may name (besides ``since`` and ``until``).
RUN_FILTERS = frozenset(
    {
        "substrate",
        "kind",
        "mode",
        "tier",
        "steps",
        "fidelity",
        "launch_type",
        "vantage",
        "status",
        "run_id",
    }
)


def where(filters: dict[str, Any], prefix: str, allowed: frozenset[str]) -> tuple[str, list[Any]]:
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
            many = isinstance(value, Iterable) and not isinstance(value, (str, bytes))
            values = list(value) if many else [value]
            clauses.append(f"{column} IN ({', '.join('?' for _ in values)})")
            params.extend(values)
        else:
            raise StoreError(f"unknown filter {key!r}")
    return ("WHERE " + " AND ".join(clauses)) if clauses else "", params


def insert(table: str, columns: Sequence[str], verb: str = "INSERT") -> str:
    """An INSERT of `columns`, every value a bound parameter."""
    return f"{verb} INTO {table} ({', '.join(columns)}) VALUES ({', '.join('?' for _ in columns)})"


def select(columns: Sequence[str] | None, known: Sequence[str]) -> str:
    """A SELECT list of `columns` (all for None); a column not in `known` is an error, so a
    caller's name never reaches SQL unchecked."""
    if columns is None:
        return "*"
    unknown = [c for c in columns if c not in known]
    if unknown:
        raise StoreError(f"unknown column(s) {', '.join(unknown)}")
    return ", ".join(f"[{c}]" for c in columns)


def limit(rows: int | None, params: list[Any]) -> str:
    """A LIMIT clause (its value bound in `params`), or nothing for None."""
    if rows is None:
        return ""
    params.append(int(rows))
    return " LIMIT ?"


class Table:
    """One table of a `rtax.store.database.Store` (or a few read together), as an object the
    store holds (sqlite-utils' habit: ``db["runs"]`` is a `Table` of its `Database`).

    Why the store hands in its connection and its `transaction`: a table never opens a
    connection of its own, so its writes join the store's transaction when one is open (a
    rollout's run, actions and summaries are one), and start their own otherwise."""

    def __init__(
        self,
        db: sqlite_utils.Database,
        transaction: Callable[[], AbstractContextManager[None]],
    ) -> None:
        self.db = db
        self.transaction = transaction

    def _frame(self, sql: str, params: Sequence[Any] = ()) -> pd.DataFrame:
        # from_records over fetchall is about 1.5x faster than pd.read_sql_query here, and
        # the dashboard reads up to 100,000 runs per page.
        cursor = self.db.conn.execute(sql, list(params))
        try:
            columns = [d[0] for d in cursor.description]
            return pd.DataFrame.from_records(cursor.fetchall(), columns=columns)
        finally:
            cursor.close()

    def _rows(self, sql: str, params: Sequence[Any] = ()) -> list[dict[str, Any]]:
        cursor = self.db.conn.execute(sql, list(params))
        try:
            names = [d[0] for d in cursor.description]
            return [dict(zip(names, row, strict=True)) for row in cursor.fetchall()]
        finally:
            cursor.close()

    def _one(self, sql: str, params: Sequence[Any] = ()) -> tuple[Any, ...] | None:
        """The first row of `sql` (None: no row)."""
        cursor = self.db.conn.execute(sql, list(params))
        try:
            return cursor.fetchone()
        finally:
            cursor.close()


def marks(values: Sized) -> str:
    """``?, ?, ...``: one bound parameter per value (an IN list)."""
    return ", ".join("?" for _ in range(len(values)))


def chunks(values: Sequence[Any], size: int = 500) -> Iterator[list[Any]]:
    """`values` in lists of at most `size` (SQLite's bound-parameter limit stays far away)."""
    for start in range(0, len(values), size):
        yield list(values[start : start + size])
