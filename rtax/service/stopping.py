"""How the CLI stops: SIGTERM and SIGINT become an exception *and* a flag.

Why both (docs/cli.md): SIGTERM takes Ctrl-C's path (clean up, record nothing half-done), so its
handler raises. But Python drops an exception that a handler raises while a finalizer runs (a
Popen's ``__del__``: "Exception ignored in ..."); CI saw `rtax probe` carry on after SIGTERM
that way. So the handlers also set `STOP`, which every long wait watches (the batch between
rollouts, the runner at every step, `rtax schedule`, `rtax emulate`), and `signals()` re-raises
at its end a signal whose exception was lost.

Only the first signal raises. A second one (Ctrl-C in a terminal sends SIGINT to every process
of the group, and `make run` then sends its scheduler SIGTERM too) lands in the clean-up the
first one started, and an exception there would cut it short: seen as a scheduler that said
"cleaned up" and left its warm pools' containers, its snapshots' folders and a committed image
behind. So a later signal only sets the flag; the clean-up is bounded by its calls' timeouts.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager


class Terminated(KeyboardInterrupt):
    """SIGTERM, turned into the same path as Ctrl-C: clean up, record nothing half-done."""


#: Set by SIGTERM and SIGINT while `signals()` is in force.
STOP = threading.Event()
_RECEIVED: list[int] = []


def terminated() -> bool:
    """Whether SIGTERM (rather than Ctrl-C) asked to stop."""
    return signal.SIGTERM in _RECEIVED


def _stop(signum: int, raised: type[KeyboardInterrupt]) -> None:
    first = not _RECEIVED
    _RECEIVED.append(signum)
    STOP.set()
    if first:  # a later one lands in the first one's clean-up: not cut short (module doc)
        raise raised


def _terminate(signum: int, frame: object) -> None:
    _stop(signum, Terminated)


def _interrupt(signum: int, frame: object) -> None:
    _stop(signum, KeyboardInterrupt)


@contextmanager
def signals() -> Iterator[None]:
    """SIGTERM and SIGINT raise and set `STOP` inside; a signal whose exception was lost is
    raised on the way out."""
    previous = signal.signal(signal.SIGTERM, _terminate)
    previous_int = signal.signal(signal.SIGINT, _interrupt)
    STOP.clear()
    _RECEIVED.clear()
    try:
        yield
        if _RECEIVED:  # the signal's exception was lost in a finalizer; its flag was not
            raise Terminated if terminated() else KeyboardInterrupt
    finally:
        signal.signal(signal.SIGTERM, previous)
        signal.signal(signal.SIGINT, previous_int)
