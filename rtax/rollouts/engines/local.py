"""The local engine: each rollout in a worker thread of this process (the default).

Why threads (docs/ray.md): a probe waits on a substrate's API and computes nothing, so one process
holds many; the wall-clock backstop of `rtax.rollouts.deadline` frees a slot from a call that
never returns. Substrates come from the caller's `Composition` (its factory, emulations and git
servers).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from typing import Any

from rtax.compose import Composition
from rtax.core.failures import CANCELLED, HARNESS_ERROR
from rtax.core.record import RolloutRecord
from rtax.rollouts.deadline import run_with_deadline
from rtax.rollouts.engines.base import RolloutSpec, build, failure, settle, stamp
from rtax.settings import SubstrateConfig
from rtax.settings.engine import EngineSettings
from rtax.substrates import reaper

Log = Callable[[str], None]


class LocalEngine:
    """Today's threads: each rollout in a worker thread of the scheduler's process, with the
    wall-clock backstop of `rtax.rollouts.deadline`. Substrates come from the scheduler's
    `Composition` (its factory, its emulations, its git servers)."""

    name = "local"

    def __init__(
        self,
        compose: Composition,
        cancel: threading.Event,
        settings: EngineSettings | None = None,
    ) -> None:
        self.compose = compose
        self.cancel = cancel
        self.vantage = (settings or EngineSettings()).vantage

    def start(self) -> None:
        """Nothing to join: the threads are this process's."""

    def submit(self, spec: RolloutSpec) -> Future[RolloutRecord | None]:
        """Set the rollout up here, in the caller's thread (the scheduler's plan worker: a git
        daemon dies with the thread that started it), then run it in a thread of its own."""
        future: Future[RolloutRecord | None] = Future()
        # with a warm pool in the entry, the pool it claims from (`Composition.for_rollouts`)
        built = build(spec, self.compose.for_rollouts, self.compose.source)
        if isinstance(built, RolloutRecord):
            settle(future, self._stamped(built))
            return future
        substrate, workload = built

        def run() -> None:
            try:
                record = run_with_deadline(
                    substrate, workload, spec.deadline_s, self.cancel, run_id=spec.run_id
                )
                if record is not None and record.run["error_class"] == CANCELLED:
                    record = None  # stopping: half a rollout is no sample, nor a failure
                settle(future, None if record is None else self._stamped(record))
            except BaseException as exc:  # never leave the scheduler waiting on a future
                settle(future, failure(spec, HARNESS_ERROR, repr(exc)))
                raise

        threading.Thread(target=run, name=f"engine-{spec.run_id[:8]}", daemon=True).start()
        return future

    def _stamped(self, record: RolloutRecord) -> RolloutRecord:
        return stamp(record, self.vantage, {"kind": self.name, "vantage": self.vantage})

    def prepare(self, conf: SubstrateConfig, log: Log) -> None:
        self.compose.build(conf).prepare(log)

    def sweep(self, confs: Sequence[SubstrateConfig], log: Any) -> list[reaper.Orphan]:
        by_name = {c.name: c for c in confs}
        return reaper.sweep(list(by_name), lambda n: self.compose.build(by_name[n]), log)

    def close(self) -> None:
        """Nothing of its own: the composition is the scheduler's."""
