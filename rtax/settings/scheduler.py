"""The ``[scheduler]`` and ``[retention]`` tables: how `rtax schedule` runs and how long it keeps
raw samples (docs/configuration.md#scheduler, docs/configuration.md#retention).

Why together: both tune the long-running scheduler rather than what it probes, and neither
depends on another table; the plans (`rtax.settings.plans`) say what it runs.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from rtax.core.checks import Bad, duration, duration_at_least, is_positive, is_whole, unknown_keys

#: The scheduler's durations and their defaults; each must be at least 1 s.
_DURATIONS = (("deadline", "15m"), ("misfire_grace", "5m"), ("reap_interval", "5m"))


@dataclass(frozen=True)
class Retention:
    """The ``[retention]`` table: raw samples older than `raw_days` are folded into rollups."""

    raw_days: float
    bucket: str  # "hour" or "day"


@dataclass(frozen=True)
class SchedulerSettings:
    """The ``[scheduler]`` table (`rtax.settings.Config` keeps its values as its own fields)."""

    concurrency: int
    deadline_s: float
    misfire_grace_s: float
    #: how often the scheduler reaps expired and orphaned environments (it also does at start)
    reap_interval_s: float


def parse_retention(table: Any, bad: Bad) -> Retention:
    """The ``[retention]`` table, each mistake reported through `bad`."""
    if not isinstance(table, dict):
        bad("retention", "must be a table")
        table = {}
    unknown_keys(table, "retention", {"raw_days", "bucket"}, bad)
    raw_days = table.get("raw_days", 30)
    if not is_positive(raw_days):
        bad("retention.raw_days", "must be a positive number of days")
        raw_days = 30
    bucket = table.get("bucket", "hour")
    if bucket not in ("hour", "day"):
        bad("retention.bucket", 'must be "hour" or "day"')
        bucket = "hour"
    return Retention(float(raw_days), bucket)


def parse_scheduler(table: Any, bad: Bad) -> SchedulerSettings:
    """The ``[scheduler]`` table, each mistake reported through `bad`."""
    if not isinstance(table, dict):
        bad("scheduler", "must be a table")
        table = {}
    unknown_keys(
        table, "scheduler", {"concurrency", "deadline", "misfire_grace", "reap_interval"}, bad
    )
    concurrency = table.get("concurrency", 1)
    if not is_whole(concurrency, low=1):
        bad("scheduler.concurrency", "must be a whole number >= 1")
        concurrency = 1
    seconds = {}
    for key, default in _DURATIONS:
        try:
            seconds[key] = duration_at_least(table.get(key, default), 1)
        except ValueError as exc:
            bad(f"scheduler.{key}", str(exc))
            seconds[key] = duration(default)
    return SchedulerSettings(
        concurrency, seconds["deadline"], seconds["misfire_grace"], seconds["reap_interval"]
    )
