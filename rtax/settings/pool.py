"""A warm pool's shape: the ``pool`` table of a ``[[substrates]]`` entry
(docs/configuration.md#warm-pools).

Why in the settings, and a module apart from the substrates table: the configuration checks it
when the file is read, and the pool (`rtax.substrates.pool`) takes `PoolSettings` as it is,
without the rest of a substrate's entry; a pool built in code (a benchmark, a test) passes the
same bounds, checked once, in `PoolSettings` itself.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from rtax.core.checks import Bad, duration_at_least, is_number, is_whole, unknown_keys

_KEYS = ("size", "refill_concurrency", "max_idle")


@dataclass(frozen=True)
class PoolSettings:
    """A pool's shape (docs/configuration.md#warm-pools); every bound is checked here."""

    #: environments kept ready
    size: int
    #: creates in flight at most while refilling (1 .. size)
    refill_concurrency: int = 1
    #: an environment older than this (from its create request) is replaced; its expiry
    #: label covers this wait and one rollout
    max_idle_s: float = 600.0

    def __post_init__(self) -> None:
        if not is_whole(self.size, low=1):
            raise ValueError(f"size must be a whole number >= 1, got {self.size!r}")
        if not is_whole(self.refill_concurrency) or not 1 <= self.refill_concurrency <= self.size:
            raise ValueError(
                f"refill_concurrency must be a whole number from 1 to size ({self.size}), got "
                f"{self.refill_concurrency!r} (no more creates can be in flight than slots)"
            )
        idle = self.max_idle_s
        if not is_number(idle) or not 0 < idle < 1e9:
            raise ValueError(f"max_idle must be a positive number of seconds, got {idle!r}")

    def describe(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def parse(table: Any, key: str, bad: Bad) -> PoolSettings | None:
    """A ``pool`` table (``{size = 4, refill_concurrency = 2, max_idle = "10m"}``), each
    mistake reported through `bad` under `key`; None when it is unusable."""
    if not isinstance(table, dict):
        bad(key, "must be a table: pool = {size = 4, refill_concurrency = 2}")
        return None
    unknown_keys(table, key, _KEYS, bad, say_known=_KEYS)
    if "size" not in table:
        bad(f"{key}.size", "missing (how many environments to keep ready, >= 1)")
        return None
    values: dict[str, Any] = {"size": table["size"]}
    values["refill_concurrency"] = table.get("refill_concurrency", 1)
    try:
        values["max_idle_s"] = duration_at_least(table.get("max_idle", "10m"), 1)
    except ValueError as exc:
        bad(f"{key}.max_idle", str(exc))
        return None
    try:
        return PoolSettings(**values)
    except ValueError as exc:
        name = str(exc).split(" ", 1)[0]
        bad(f"{key}.{'max_idle' if name == 'max_idle' else name}", str(exc))
        return None
