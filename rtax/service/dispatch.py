"""Handing a plan's rollouts to the engine, one probe slot each, and keeping every record.

Why apart from the scheduler (docs/configuration.md#scheduler): *when* a plan runs is the
scheduler's (its jobs, due times, the misfire grace); *whether* one more rollout may start now
(a free probe slot, today's budget counted with the rollouts still in flight) and what becomes
of its record (stored, else spooled; a rollout that could not even be handed over kept as a
classified failure) is this module's. Both sides are small enough to read whole.
"""

from __future__ import annotations

import logging
import threading
import time
from concurrent.futures import Future
from datetime import UTC, datetime

from rtax.compose import Composition
from rtax.core.record import RolloutRecord
from rtax.rollouts.engines import Engine
from rtax.rollouts.engines.base import RolloutSpec, setup_failure
from rtax.service import budget
from rtax.settings.config import Config, Plan, SubstrateConfig
from rtax.store.database import Store
from rtax.store.spool import Spool

log = logging.getLogger(__name__)

#: What `Dispatcher.dispatch` says of a rollout it did not hand over.
SKIPPED = True  # today's budget forbids it: the cycle goes on
TOO_LATE = False  # past the misfire grace, or stopping: the rest of the cycle is skipped


class Dispatcher:
    """The probe slots (``[scheduler] concurrency``), the rollouts in flight per substrate
    (which today's budget counts before they are stored) and the one writer of records."""

    def __init__(
        self,
        config: Config,
        compose: Composition,
        engine: Engine,
        spool: Spool,
        stopped: threading.Event,
    ) -> None:
        self.config = config
        self.compose = compose
        self.engine = engine
        self.spool = spool
        self.stopped = stopped
        #: one per rollout in flight (and held by the reaper and retention while they work,
        #: so that neither overlaps a measurement)
        self.slots = threading.BoundedSemaphore(config.concurrency)
        #: rollouts running now, per substrate name (monotonic start times), so that budgets
        #: count them before they are stored; guarded by `_budget_lock`
        self.in_flight: dict[str, list[float]] = {}
        self._budget_lock = threading.Lock()

    def over_budget(self, conf: SubstrateConfig, store: Store) -> str | None:
        """Why today's budget of `conf` forbids another rollout, or None."""
        return budget.forbids(conf, store, running=self.in_flight.get(conf.name, []))

    def dispatch(
        self, plan: Plan, conf: SubstrateConfig, vantage: str | None, scheduled: datetime | None
    ) -> Future[RolloutRecord | None] | bool:
        """Take a probe slot and hand one rollout to the engine; its future (the slot is
        freed when it is stored), `SKIPPED` when today's budget skips it, `TOO_LATE` when the
        cycle is already later than the misfire grace (or the scheduler stopped while this
        waited for a slot)."""
        self.slots.acquire()
        started: float | None = None
        future: Future[RolloutRecord | None] | None = None
        try:
            if self.stopped.is_set() or self._too_late(plan, scheduled):
                return TOO_LATE
            started = self._count_in(plan, conf)
            if started is None:
                return SKIPPED
            spec = RolloutSpec(
                self.compose.entry(conf.name),
                plan.tier,
                plan.steps,
                seed=0,
                deadline_s=self.config.deadline_s,
                overrides={"mode": plan.mode} if plan.mode else {},
                vantage=vantage,
            )
            future = self.engine.submit(spec)
            # counted against what is stored, spooled or abandoned at stop (`make soak`)
            log.info("rollout started: %s %s (plan %s)", conf.name, plan.tier, plan.name)
        finally:
            if future is None:  # skipped, or it could not be handed over: the slot is free
                self._free(conf, started)
        future.add_done_callback(lambda f: self._finished(f, plan, conf, scheduled, started))
        return future

    def _too_late(self, plan: Plan, scheduled: datetime | None) -> bool:
        if scheduled is None:
            return False
        late = (datetime.now(UTC) - scheduled).total_seconds()
        if late <= self.config.misfire_grace_s:
            return False
        log.warning(
            "plan %s: %.0f s late (waiting for a probe slot), past the misfire grace; the rest "
            "of this cycle is skipped",
            plan.name,
            late,
        )
        return True

    def _count_in(self, plan: Plan, conf: SubstrateConfig) -> float | None:
        """Count one more rollout of `conf` in flight (its start), or None when today's budget
        forbids it: checked and counted in one step, so concurrent plans can't both take the
        last rollout."""
        with self._budget_lock:
            with self.compose.store() as store:
                why = self.over_budget(conf, store)
            if why:
                log.info(
                    "plan %s: %s is over its daily budget (%s); skipped", plan.name, conf.name, why
                )
                return None
            started = time.monotonic()
            self.in_flight.setdefault(conf.name, []).append(started)
            return started

    def _free(self, conf: SubstrateConfig, started: float | None) -> None:
        if started is not None:
            with self._budget_lock:
                self.in_flight[conf.name].remove(started)
        self.slots.release()

    def _finished(
        self,
        future: Future[RolloutRecord | None],
        plan: Plan,
        conf: SubstrateConfig,
        scheduled: datetime | None,
        started: float | None,
    ) -> None:
        """Store a finished rollout (none when it was cancelled: stopping), then free its
        slot."""
        try:
            record = future.result()
            if record is None:  # stopping: half a rollout is no sample, and no failure either
                log.info("rollout abandoned (stopping): %s (plan %s)", conf.name, plan.name)
                return
            self.keep(record, plan, scheduled)
            run = record.run
            log.info(
                "plan %s: %s %s%s %s in %.3f s%s",
                plan.name,
                run["substrate"],
                run["tier"],
                f" S={run['steps']}" if run["steps"] else "",
                run["status"],
                run["wall_s"] or 0.0,
                f" ({run['error_class']})" if run["error_class"] else "",
            )
        except Exception:
            log.exception("plan %s on %s: could not keep the rollout", plan.name, conf.name)
        finally:
            self._free(conf, started)

    # -- keeping every record ----------------------------------------------------------------

    def save(self, record: RolloutRecord) -> None:
        """Store `record`; if the database is busy or unavailable, spool it: a record is never
        lost to rtax's own trouble (docs/measurement.md#failures)."""
        self.spool.save(record)

    def keep(self, record: RolloutRecord, plan: Plan, scheduled: datetime | None) -> None:
        """Announce `record`, then save it with its plan and due time."""
        _announce(record)
        self.save(_planned(record, plan, scheduled))

    def save_setup_error(
        self,
        plan: Plan,
        conf: SubstrateConfig,
        scheduled: datetime | None,
        exc: Exception,
        *,
        vantage: str | None = None,
    ) -> RolloutRecord:
        """A rollout that could not even be handed to the engine is a failure too: kept as a
        row, classified as `rtax.rollouts.engines.base.setup_failure` does (rtax's own trouble a
        `harness_error`, anything else a `setup_error`)."""
        spec = RolloutSpec(
            conf,
            plan.tier,
            plan.steps,
            overrides={"mode": plan.mode} if plan.mode else {},
            vantage=vantage,
        )
        record = setup_failure(spec, exc)
        self.keep(record, plan, scheduled)
        return record


def _announce(record: RolloutRecord) -> None:
    """Log a measured rollout *before* it is stored, with its run id: a record that is then
    lost (neither in the database nor in the spool) is visible in the log, and the fault suite
    counts it (docs/faults.md)."""
    run = record.run
    log.info(
        "rollout finished: %s %s [run %s]",
        run["substrate"],
        run["status"] if not run["error_class"] else f"{run['status']} ({run['error_class']})",
        run["run_id"],
    )


def _planned(record: RolloutRecord, plan: Plan, scheduled: datetime | None) -> RolloutRecord:
    """`record` with its plan and, beside its actual start, when it was due."""
    record.run["plan"] = plan.name
    if scheduled is not None:
        record.run["scheduled_at"] = scheduled.astimezone(UTC).isoformat(timespec="microseconds")
    return record
