"""Poll with a deadline: how a test waits for something another thread or process does.

Why one helper: the tests never sleep to synchronise (a fixed sleep is either too short on a
loaded machine or wasted time on a quiet one); they poll a predicate at a fine interval and fail
with a message naming what did not happen."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any


def wait_for(
    predicate: Callable[[], Any], timeout_s: float, what: str, interval_s: float = 0.05
) -> Any:
    """The first truthy value of `predicate()`, polled every `interval_s` for `timeout_s`;
    AssertionError naming `what` if none came."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval_s)  # polling with a deadline
    raise AssertionError(f"{what} did not happen within {timeout_s} s")
