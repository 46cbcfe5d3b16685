"""One rollout in a worker thread, with a wall-clock backstop and prompt cancellation.

Why (docs/configuration.md#scheduler): the probe runner enforces a rollout's deadline between
substrate calls, but a call that never returns (a hung API) would hold a probe slot for ever and
stop the monitor. So the scheduler runs each rollout in a daemon thread and, past the deadline plus
a grace for the runner's own cleanup, records the rollout as ``deadline_exceeded`` and goes on;
the stuck rollout cleans up whenever it returns and is not recorded. When the scheduler stops,
a rollout ends at its next step; one stuck in a long call is left after `STOP_GRACE_S`.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from datetime import UTC, datetime

from rtax.core.failures import DeadlineExceeded
from rtax.core.options import RolloutOptions
from rtax.core.record import RolloutRecord, failed_record
from rtax.core.workloads import Workload
from rtax.rollouts.rollout import identity, run_rollout
from rtax.substrates.base import Substrate

log = logging.getLogger(__name__)

#: How long a stop waits for a rollout in flight to end and clean up before leaving it: rollouts
#: end at their next step; this bounds one stuck in a long substrate call.
STOP_GRACE_S = 3.0


def run_with_deadline(
    substrate: Substrate,
    workload: Workload,
    deadline: float,
    cancel: threading.Event,
    run_id: str | None = None,
) -> RolloutRecord | None:
    """The rollout's record (a ``deadline_exceeded`` one if it never returned); None if
    `cancel` was set while it was still busy. `run_id`: chosen by the caller before dispatch
    (`rtax.rollouts.engines.base.RolloutSpec`), else here."""
    result: list[RolloutRecord] = []
    started = datetime.now(UTC)
    run_id = run_id or uuid.uuid4().hex
    options = RolloutOptions(deadline_s=deadline, cancel=cancel)
    worker = threading.Thread(
        target=lambda: result.append(
            run_rollout(substrate, workload, run_id=run_id, options=options)
        ),
        name=f"rollout-{run_id[:8]}",
        daemon=True,
    )
    worker.start()
    # The runner enforces the deadline between calls; this is the backstop for a call that
    # never returns (a hung API), with 10% of grace for the runner's own cleanup.
    backstop = deadline * 1.1 + 1.0
    end = time.monotonic() + backstop
    while worker.is_alive() and time.monotonic() < end:
        if cancel.is_set():
            # Stopping: the rollout ends at its next step and cleans up; one stuck in a long
            # substrate call is not waited for (the next start's reaper removes what it
            # leaves), so that stopping stays prompt.
            worker.join(min(STOP_GRACE_S, max(end - time.monotonic(), 0)))
            if worker.is_alive():
                log.warning(
                    "rollout %s on %s still busy %.0f s after the stop: not recorded",
                    run_id,
                    substrate.name,
                    STOP_GRACE_S,
                )
                return None
            break
        worker.join(min(0.1, max(end - time.monotonic(), 0)))  # supervising, not timing
    if result:
        return result[0]
    log.error(
        "rollout %s on %s still busy after %.0f s: recorded as deadline_exceeded; it will "
        "clean up when it returns",
        run_id,
        substrate.name,
        backstop,
    )
    return failed_record(
        identity(substrate, workload),
        run_id,
        started,
        DeadlineExceeded.error_class,
        f"the rollout did not return within {backstop:.0f} s",
        wall_s=backstop,
    )
