"""Learning of an event by polling: a fixed interval, a deadline, and a disclosed resolution.

Why one helper (docs/measurement.md#resolution): when rtax learns of an event (a container running,
a command finished, an instance terminated) by asking again and again, the moment it records is
the moment of the *check* that saw it, not of the event. The event happened somewhere between
the previous check, which did not see it, and this one. An exponential back-off makes that gap
grow with the wait (a 0.31 s SSM command was recorded as ~0.62 s), so every poll loop uses this
helper instead: a fixed interval chosen per API (fine, within the API's documented rate limit),
and the gap in effect at detection returned as the measurement's *resolution*, which substrates
report to the probe runner (`Environment.resolution`, `CommandResult.resolution_s`) and the
store keeps beside the latency.

Resolution, precisely: the time from the end of the previous (negative) check, or from the
start of the wait when the helper was asked to pause before its first check, to the start of
the check that saw the event. It is 0 when the very first check, made at once, already saw it:
then the event preceded the wait and polling added nothing to what was timed. The check's own
round trip is not counted; it is part of every API call, polled or not.

Part of the substrate kit (`rtax.substrates.kit`, which re-exports it). Rate-limit retries are a
different thing (the service asked to slow down): `kit.RetryPolicy`.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Generic, TypeVar

from rtax.substrates.base import clock

T = TypeVar("T")


@dataclass(frozen=True)
class Polled(Generic[T]):
    """What a poll found: the value, the resolution in seconds (see the module docstring) and
    the number of checks made."""

    value: T
    resolution_s: float
    attempts: int


def poll(
    check: Callable[[], T | None],
    *,
    interval_s: float,
    deadline: float,
    timeout: Callable[[], BaseException],
    pause_first: bool = False,
    now: Callable[[], float] = clock,
    sleep: Callable[[float], None] = time.sleep,
) -> Polled[T]:
    """Call `check` every `interval_s` until it returns something other than None.

    `deadline` is on the `now` timeline. After a negative check at or past the deadline,
    `timeout()` is raised; the pause before a check never reaches past the deadline, so the last
    check is made at the deadline, not after it. `pause_first` waits one interval before the
    first check, for events that can't have happened yet (a command just sent): then even a
    first-check success has a resolution of the pause. Exceptions from `check` propagate: it
    decides what is an answer, what is "not yet" (None) and what is a failure.
    """
    if interval_s <= 0:
        raise ValueError(f"interval_s must be > 0, got {interval_s!r}")
    attempts = 0
    # The moment after which the event, if not yet seen, may happen: the start of the wait
    # when the first check is deferred, else the end of each negative check.
    last_negative: float | None = None
    if pause_first:
        last_negative = now()
        _pause(interval_s, deadline, now, sleep)
    while True:
        started = now()
        value = check()
        attempts += 1
        if value is not None:
            resolution = 0.0 if last_negative is None else max(started - last_negative, 0.0)
            return Polled(value, resolution, attempts)
        last_negative = now()
        if last_negative >= deadline:
            raise timeout()
        _pause(interval_s, deadline, now, sleep)


def _pause(
    interval_s: float,
    deadline: float,
    now: Callable[[], float],
    sleep: Callable[[float], None],
) -> None:
    """Sleep one interval, cut short at the deadline (never a sleep past it)."""
    wait = min(interval_s, deadline - now())
    if wait > 0:
        sleep(wait)
