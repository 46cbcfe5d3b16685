"""Every wait of the suite, with one deadline: how a test waits for something another thread,
process, server or browser does.

Why one deadline, and a generous one: CI has 2 cores and other work may run beside the suite,
and a test that passes alone and fails under load is a broken test. A wait that is met returns
the moment it is met, so a long deadline costs a passing test nothing; only a test that is
already failing waits it out. So no wait in the suite is shorter than `DEADLINE_S` (120 s; a
slower machine raises it with `RTAX_TEST_DEADLINE_S`), whether it is a condition polled here, a
server's health, a browser's navigation, locators and assertions (tests/browser.py), a thread,
a future or a subprocess.

Why polling: the tests never sleep to synchronise (a fixed sleep is either too short on a
loaded machine or wasted time on a quiet one); they poll a predicate at a fine interval and fail
with a message naming what did not happen. A sleep that paces a workload or opens a time gap on
purpose is not a wait, and says so where it stands."""

from __future__ import annotations

import os
import subprocess
import threading
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

#: What raises the deadline on a slow machine (seconds).
ENV = "RTAX_TEST_DEADLINE_S"


def _deadline_from_env() -> float:
    raw = os.environ.get(ENV, "120")
    try:
        value = float(raw)
    except ValueError:
        raise ValueError(f"{ENV} must be a number of seconds, not {raw!r}") from None
    if not 0 < value < float("inf"):
        raise ValueError(f"{ENV} must be a positive number of seconds, not {raw!r}")
    return value


#: The deadline of every wait in the suite, in seconds (and in milliseconds, Playwright's unit).
DEADLINE_S: float = _deadline_from_env()
DEADLINE_MS: int = int(DEADLINE_S * 1000)


def deadline_s(at_least: float = 0.0) -> float:
    """The deadline of one wait: `DEADLINE_S`, or `at_least` for a wait on work known to take
    longer than that even alone (26 rollouts on a Ray cluster); never less than `DEADLINE_S`."""
    return max(DEADLINE_S, at_least)


def _arrived(value: Any) -> bool:
    if value is None or value is False:
        return False
    try:
        return bool(value)
    except (TypeError, ValueError):  # a value without a truth value (a DataFrame) is an answer
        return True


def wait_for(
    predicate: Callable[[], Any],
    what: str | Callable[[], str],
    *,
    timeout_s: float | None = None,
    interval_s: float = 0.05,
    ignoring: tuple[type[BaseException], ...] = (),
) -> Any:
    """The first value of `predicate()` that is an answer (not None, False or empty), polled
    every `interval_s` until `deadline_s(timeout_s)`. An exception of a type in `ignoring` (a
    server not listening yet: OSError) counts as no answer; any other one ends the wait at once.
    AssertionError naming `what` (or what `what()` says then: what is still there), the
    deadline and the last value or error if none came."""
    limit = deadline_s(timeout_s or 0.0)
    deadline = time.monotonic() + limit
    last: Any = None
    while True:
        try:
            value = predicate()
        except ignoring as exc:
            last = exc
        else:
            if _arrived(value):
                return value
            last = value
        if time.monotonic() >= deadline:
            said = what() if callable(what) else what
            raise AssertionError(
                f"waited {limit:g} s for {said}; it never happened (last: {_short(last)}); "
                f"a slower machine raises the deadline with {ENV}"
            )
        time.sleep(interval_s)  # polling with a deadline


def _short(value: Any, limit: int = 500) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[:limit] + "…"


def answers(url: str, body: bytes | None = None, timeout_s: float | None = None) -> bool:
    """Whether `url` answers a GET now (with exactly `body`, if given); False while nothing
    listens or the answer is an error. One request, bounded by `timeout_s` (the deadline)."""
    try:
        with urllib.request.urlopen(url, timeout=timeout_s or DEADLINE_S) as answer:
            return body is None or answer.read() == body
    except OSError:
        return False


def serving(
    url: str,
    what: str,
    proc: subprocess.Popen[Any] | None = None,
    body: bytes | None = None,
    log: Path | None = None,
) -> None:
    """Wait until `url` answers (a server's health endpoint), each request bounded by the time
    left; if `proc` (the server) exits first, fail at once with its output (its stdout pipe,
    or the end of `log`, the file it writes to)."""
    deadline = time.monotonic() + DEADLINE_S

    def up() -> bool:
        if proc is not None and proc.poll() is not None:
            out = proc.stdout.read() if proc.stdout else b""
            if log is not None:
                out = log.read_bytes()[-4000:]
            text = out.decode(errors="replace") if isinstance(out, bytes) else out
            raise AssertionError(f"{what} exited ({proc.returncode}) before answering:\n{text}")
        return answers(url, body, timeout_s=max(0.5, deadline - time.monotonic()))

    wait_for(up, f"{what} to answer {url}", interval_s=0.2)


def joined(thread: threading.Thread, what: str, timeout_s: float | None = None) -> None:
    """Join `thread` within the deadline; AssertionError naming `what` if it is still running."""
    limit = deadline_s(timeout_s or 0.0)
    thread.join(limit)
    if thread.is_alive():
        raise AssertionError(f"waited {limit:g} s for {what}; the thread is still running")
