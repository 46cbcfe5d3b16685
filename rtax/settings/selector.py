"""A series selector as the configuration and the CLI write it (`rtax.core.series.Selector`).

Why one reader: ``[[maintenance]]``, ``[[slos]]`` and ``rtax maintenance add --series`` name
series the same way, a table of dimensions to one value or a list of values
(``{substrate = ["docker", "docker-gvisor"], tier = "T0"}``), so their mistakes read the same:
one line naming the key.
"""

from __future__ import annotations

from typing import Any

from rtax.core.checks import Bad, is_text, is_whole, unknown_keys
from rtax.core.series import SELECTOR_KEYS, Selector


def parse(raw: Any, key: str, bad: Bad, substrates: set[str] | None = None) -> Selector:
    """The selector table at `key` (absent or empty: every series); a substrate must be one of
    `substrates` when they are given. Each mistake through `bad`."""
    if raw is None:
        return Selector()
    if not isinstance(raw, dict):
        bad(key, 'must be a table of dimensions, e.g. {substrate = "docker", tier = "T0"}')
        return Selector()
    unknown_keys(raw, key, SELECTOR_KEYS, bad, say_known=SELECTOR_KEYS)
    values: dict[str, tuple[Any, ...]] = {}
    for dimension in SELECTOR_KEYS:
        if dimension not in raw:
            continue
        given = raw[dimension]
        items = given if isinstance(given, list) else [given]
        check = (lambda v: is_whole(v, low=0)) if dimension == "steps" else is_text
        if not items or not all(check(v) for v in items):
            what = "whole numbers >= 0" if dimension == "steps" else "non-empty strings"
            bad(f"{key}.{dimension}", f"must be one value or a list of {what}")
            continue
        if dimension == "substrate" and substrates is not None:
            for name in items:
                if name not in substrates:
                    bad(
                        f"{key}.substrate",
                        f"unknown substrate {name!r} (define it in [[substrates]])",
                    )
        values[dimension] = tuple(items)
    return Selector(**values)


def flags_table(flags: list[str], bad: Bad) -> dict[str, list[Any]]:
    """``--series substrate=docker --series tier=T0,T2`` as the table `parse` reads: each flag
    one dimension, values separated by commas (steps as numbers)."""
    raw: dict[str, list[Any]] = {}
    for flag in flags:
        name, sep, value = flag.partition("=")
        if not sep or not name or not value:
            bad("--series", f"{flag!r}: write DIMENSION=VALUE[,VALUE] (e.g. substrate=docker)")
            continue
        items: list[Any] = value.split(",")
        if name == "steps":
            try:
                items = [int(v) for v in items]
            except ValueError:
                bad("--series steps", f"{value!r}: steps are whole numbers")
                continue
        raw.setdefault(name, []).extend(items)
    return raw
