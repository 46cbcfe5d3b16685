"""The small validators every reader of user input shares: `rtax.toml`'s tables, the CLI's
flags and the models' arguments.

Why one module: the same checks (a whole number that is not ``True``, a finite number above 0,
a duration such as ``"10m"``) were written out by hand in ten files, each with its own guard
against ``bool`` (a subclass of ``int``: ``True`` passes ``isinstance(x, int)``), and a guard
forgotten in one of them was a bug there only. The predicates here answer yes or no and leave
the message to the caller, so that every message stays one line naming its key
(docs/configuration.md#configuration); the duration readers raise `ValueError` with the
message the configuration prints. Pure, importing nothing else of rtax.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

#: How the configuration's readers report a mistake: ``bad(key, message)``, one line each.
Bad = Callable[[str, str], None]

_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|min|h|d)?\s*$")
_UNITS = {None: 1.0, "ms": 0.001, "s": 1.0, "m": 60.0, "min": 60.0, "h": 3600.0, "d": 86400.0}
_ENV_NAME = re.compile(r"[A-Z_][A-Z0-9_]*")
MAX_PORT = 65535


def is_bool(value: Any) -> bool:
    """``true`` or ``false``, not a number that could stand for one."""
    return isinstance(value, bool)


def is_whole(value: Any, low: int | None = None, high: int | None = None) -> bool:
    """A whole number (an ``int``, never a ``bool``), within [`low`, `high`] where given."""
    if not isinstance(value, int) or isinstance(value, bool):
        return False
    return (low is None or value >= low) and (high is None or value <= high)


def is_number(value: Any) -> bool:
    """A finite real number (an ``int`` or ``float``, never a ``bool``, NaN or infinity)."""
    return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)


def finite(value: Any) -> float | None:
    """A stored value as a float, or None where it is none (NULL, pandas' NaN, text, or a
    ``bool``: True is not a latency). For readers of stored rows, where a missing number is
    normal; the configuration's readers reject instead."""
    if value is None or isinstance(value, bool):
        return None
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return number if math.isfinite(number) else None


def is_positive(value: Any) -> bool:
    """A finite number above 0."""
    return is_number(value) and value > 0


def is_port(value: Any, low: int = 1) -> bool:
    """A TCP port number from `low` (0: "any free port" where that is allowed) to 65535."""
    return is_whole(value, low, MAX_PORT)


def is_text(value: Any) -> bool:
    """A non-empty string (a name, a path, an address)."""
    return isinstance(value, str) and bool(value)


def is_env_name(value: Any) -> bool:
    """The name of an environment variable as rtax accepts one: ``AWS_PROFILE``, upper case."""
    return isinstance(value, str) and _ENV_NAME.fullmatch(value) is not None


def names(value: Any) -> list[str] | None:
    """A list of strings (a single string is a list of one); None if it is not one."""
    if isinstance(value, str):
        return [value]
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        return value
    return None


def duration(value: Any) -> float:
    """Seconds from a number or a string such as "90s", "10m", "1.5h", "2d"."""
    if isinstance(value, bool):
        raise ValueError("not a duration")
    if isinstance(value, (int, float)):
        seconds = float(value)
    else:
        match = _DURATION.match(str(value))
        if not match:
            raise ValueError(f"not a duration: {value!r} (use e.g. 30s, 10m, 2h, 1d)")
        seconds = float(match.group(1)) * _UNITS[match.group(2)]
    if not math.isfinite(seconds):
        raise ValueError(f"not a finite duration: {value!r}")
    return seconds


def positive_duration(value: Any, *, zero: bool = False) -> float:
    """A `duration` above 0 (or 0 itself, with `zero`); else ValueError("must be positive")."""
    seconds = duration(value)
    if seconds < 0 or (seconds == 0 and not zero):
        raise ValueError("must be positive")
    return seconds


def duration_at_least(value: Any, least: float) -> float:
    """A `duration` of at least `least` seconds (a poll interval, a deadline)."""
    seconds = duration(value)
    if seconds < least:
        raise ValueError(f"must be at least {least:g} s")
    return seconds


def unknown_keys(
    table: Mapping[str, Any],
    key: str,
    known: Iterable[str],
    bad: Bad,
    *,
    say_known: Sequence[str] | None = None,
) -> None:
    """Report each key of `table` that is not `known`, one line each under `key`, in sorted
    order; with `say_known`, the line lists the known keys in that order."""
    hint = f" (known: {', '.join(say_known)})" if say_known is not None else ""
    for extra in sorted(set(table) - set(known)):
        bad(f"{key}.{extra}", f"unknown key{hint}")
