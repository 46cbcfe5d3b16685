"""Removing the container behind an emulated environment, even while the engine is restarting.

Why (docs/emulations.md): an emulated delete (TerminateInstances, a pod's deletion, a sandbox's)
answers at once and removes its backing container in the background, as the real services do.
If that one removal fails (the fault suite restarts the Docker engine under running rollouts),
the API no longer lists the environment but its container stays: an emulation that forgets a
deletion is a leak the real service would never have. So a failed removal is retried at a fixed
interval until a deadline; only then is it given up, said in the log, and left to the reaper
(the container still carries the rtax label of its emulation's process).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from rtax.substrates.base import Environment, Substrate, clock

log = logging.getLogger(__name__)

#: How long a backing container's removal is retried (an engine restart takes seconds).
REMOVE_DEADLINE_S = 180.0
#: The pause between two attempts.
RETRY_INTERVAL_S = 1.0


def remove(
    backing: Substrate,
    env: Environment,
    *,
    deadline_s: float = REMOVE_DEADLINE_S,
    interval_s: float = RETRY_INTERVAL_S,
    stop: threading.Event | None = None,
    wait: Callable[[float], bool] | None = None,
) -> bool:
    """Destroy `env` through `backing`, retrying every failure until `deadline_s`; True once
    it is verified gone. `stop` ends the retries early (the emulation is shutting down and
    removes what is left itself); `wait` (default: `stop`'s wait) is injectable for tests."""
    stop = stop or threading.Event()
    wait = wait or stop.wait
    end = clock() + deadline_s
    attempt = 0
    while True:
        attempt += 1
        try:
            backing.destroy(env, max(min(60.0, end - clock()), 1.0))
            return True
        except Exception as exc:  # the engine away, a timeout: the same answer, try again
            if clock() + interval_s >= end or stop.is_set():
                log.warning(
                    "could not remove backing container %s after %d attempts: %s: %s",
                    env.env_id,
                    attempt,
                    type(exc).__name__,
                    exc,
                )
                return False
        wait(interval_s)  # waiting for the engine to come back, not timing anything
