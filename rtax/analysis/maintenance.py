"""Maintenance windows: when a series is expected to misbehave, so its incidents are kept and
marked but no alert is sent (docs/alerts.md#maintenance).

Why pure and apart from where windows come from: the configuration's ``[[maintenance]]`` and the
store's windows (``rtax maintenance add``) are one list to the detection pass and the Timeline;
what a window covers is decided here, once.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from rtax.core.series import Selector, Series


@dataclass(frozen=True)
class Window:
    """A maintenance window: the series it covers (`selector`), from `start` to `end` (UTC),
    and why. `source` says where it was written: ``config`` or the store's window id."""

    selector: Selector
    start: datetime
    end: datetime
    reason: str
    source: str = "config"

    def covers(self, series: Series | Mapping[str, Any], moment: datetime) -> bool:
        """Whether `series` is in maintenance at `moment`."""
        return self.start <= moment < self.end and self.selector.matches(series)

    def describe(self) -> str:
        """``registry migration (substrate docker, 2026-12-02 14:00 → 16:00 UTC)``: what an
        incident opened inside the window is marked with."""
        span = f"{self.start:%Y-%m-%d %H:%M} → {self.end:%Y-%m-%d %H:%M} UTC"
        return f"{self.reason} ({self.selector.describe()}, {span})"


def covering(
    windows: Iterable[Window], series: Series | Mapping[str, Any], moment: datetime
) -> Window | None:
    """The first window that covers `series` at `moment`, if any."""
    return next((w for w in windows if w.covers(series, moment)), None)


def from_rows(rows: Iterable[Mapping[str, Any]]) -> list[Window]:
    """The store's windows (`rtax.store.maintenance`) as `Window`s."""
    return [
        Window(
            row["series"],
            _utc(row["start"]),
            _utc(row["end"]),
            str(row["reason"]),
            f"#{row['id']}",
        )
        for row in rows
    ]


def _utc(text: str) -> datetime:
    moment = datetime.fromisoformat(text)
    return moment if moment.tzinfo else moment.replace(tzinfo=UTC)
