"""The ``[[maintenance]]`` tables: windows planned ahead, when a series' incidents are kept and
marked but send no alert (docs/alerts.md#maintenance).

Why in the file as well as ``rtax maintenance add``: a planned window (a provider's announced
upgrade, a weekly image rebuild) is reviewed with the rest of the configuration; the pure type
is `rtax.analysis.maintenance.Window`.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from rtax.analysis.maintenance import Window
from rtax.core.checks import Bad, is_text, unknown_keys
from rtax.settings import selector

_KEYS = frozenset({"series", "start", "end", "reason"})


def moment(value: Any) -> datetime:
    """A time as the file or a flag gives it: a TOML datetime, or ISO 8601 text
    (``2026-12-02T14:00``, ``2026-12-02 14:00+01:00``); UTC when it names no zone. Else
    ValueError with the message the configuration prints."""
    if isinstance(value, datetime):
        found = value
    elif isinstance(value, str):
        try:
            found = datetime.fromisoformat(value.strip())
        except ValueError:
            raise ValueError(
                f"not a time: {value!r} (use ISO 8601, e.g. 2026-12-02T14:00Z)"
            ) from None
    else:
        raise ValueError("must be a time, e.g. 2026-12-02T14:00:00Z")
    return (found if found.tzinfo else found.replace(tzinfo=UTC)).astimezone(UTC)


def parse(raw: Any, bad: Bad, substrates: set[str]) -> tuple[Window, ...]:
    """The ``[[maintenance]]`` array; each mistake through `bad`."""
    if not isinstance(raw, list):
        bad("maintenance", "must be an array of tables ([[maintenance]])")
        return ()
    windows = []
    for i, entry in enumerate(raw):
        key = f"maintenance[{i}]"
        if not isinstance(entry, dict):
            bad(key, "must be a table")
            continue
        unknown_keys(entry, key, _KEYS, bad)
        found = window(entry, key, bad, substrates)
        if found is not None:
            windows.append(found)
    return tuple(windows)


def window(entry: dict[str, Any], key: str, bad: Bad, substrates: set[str] | None) -> Window | None:
    """One window from its keys (``series``, ``start``, ``end``, ``reason``), or None after
    reporting what is wrong; the CLI's ``rtax maintenance add`` reads its flags with it too."""
    problems: list[str] = []

    def report(where: str, message: str) -> None:
        problems.append(where)
        bad(where, message)

    reason = entry.get("reason")
    if not is_text(reason):
        report(f"{key}.reason", "missing (why: it marks every incident inside the window)")
    times = {}
    for name in ("start", "end"):
        if name not in entry:
            report(f"{key}.{name}", "missing (a time, e.g. 2026-12-02T14:00:00Z)")
            continue
        try:
            times[name] = moment(entry[name])
        except ValueError as exc:
            report(f"{key}.{name}", str(exc))
    if len(times) == 2 and times["end"] <= times["start"]:
        report(f"{key}.end", "must be after start")
    chosen = selector.parse(entry.get("series"), f"{key}.series", report, substrates)
    if problems:
        return None
    return Window(chosen, times["start"], times["end"], str(reason))
