"""A warm pool's shape: the ``pool`` table of a ``[[substrates]]`` entry
(docs/configuration.md#warm-pools).

Why in the settings: the configuration checks it when the file is read, and the pool
(`rtax.substrates.pool`) takes it as it is; every bound is checked once, here.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from rtax.core.checks import is_number, is_whole


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
