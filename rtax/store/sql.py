"""The store's SQL text: WHERE, INSERT, SELECT and LIMIT clauses built from checked names.

Why a module of its own: `rtax.store.database` and its mixins (`rtax.store.incidents`,
`rtax.store.summaries`) all build queries from keyword filters; one builder means one rule for
what a filter means, and every value reaches SQLite as a bound parameter, never as text.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any


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
