"""The live scheduler: an APScheduler background scheduler that runs the configured probe plans.

Why these choices (docs/configuration.md#scheduler):

- One job per plan, with an interval trigger and jitter, ``coalesce`` (a backlog collapses into
  one run), ``max_instances=1`` and an explicit ``misfire_grace_time`` (a run that is too late
  is skipped, never run late and mislabelled).
- A global semaphore (default 1) so that probes never run at the same time and distort each
  other's timings; each cycle visits the plan's substrates in a random order.
- Every rollout has a wall deadline. It runs in a worker thread; if the thread is still busy at
  the deadline, a failed row (``deadline_exceeded``) is written, the slot is freed and the other
  jobs go on; the stuck rollout cleans up after itself whenever it returns and is not recorded.
  A failing or hanging substrate never stops the monitor.
- The scheduled time of each run is recorded beside its actual start (``scheduled_at``,
  ``started_at``): the scheduler's lag is data too.
- Exactly one scheduler per database: an exclusive lock held for the scheduler's lifetime. It
  reaps on start (orphans that a crashed scheduler left) and every ``reap_interval``: expired
  environments go whoever owns them, so nothing outlives a long-running scheduler.
- It serves what it stored as Prometheus metrics (`rtax.service.prometheus`, docs/metrics.md).
- A substrate with a warm pool (docs/configuration.md#warm-pools) is filled at start; its
  rollouts claim from it, and the pool's environments are destroyed when the scheduler stops.
- It looks for change points and rule breaches every ``[detection] interval`` and posts their
  alerts from a thread of its own (`rtax.service.detection`, `rtax.service.alerts`, docs/alerts.md).
"""

from __future__ import annotations

import logging
import random
import threading
from concurrent import futures
from concurrent.futures import Future
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from rtax.assets.attrs import Fixture
from rtax.compose import Composition, Factory
from rtax.core import redaction
from rtax.core.record import RolloutRecord
from rtax.rollouts import engines
from rtax.service import alerts, detection, memory, prometheus
from rtax.service.dispatch import TOO_LATE, Dispatcher
from rtax.service.lock import SchedulerLock
from rtax.settings import Config, Plan
from rtax.store.spool import Spool
from rtax.substrates import build_substrate, reaper

log = logging.getLogger(__name__)


class Scheduler:
    """Runs the plans of a `Config` on a background scheduler, writing every rollout.

    Its substrates, their emulations, T2's git servers and its database come from one
    `Composition` (`rtax.compose`), which it owns for its lifetime; `factory` and `fixture`
    are handed to it (tests hand in their own)."""

    def __init__(
        self,
        config: Config,
        *,
        factory: Factory = build_substrate,
        fixture: Fixture | None = None,
        clock_start: datetime | None = None,
    ) -> None:
        redaction.install()  # every log record it makes, and its libraries', is scrubbed
        self.config = config
        self.compose = Composition(
            config, emulations="owned", factory=factory, fixture=fixture, log=log.info
        )
        self.lock = SchedulerLock(config.database)
        self.enabled: dict[str, bool] = {}
        self._due: dict[str, list[datetime]] = {}
        self._due_changed = threading.Condition()
        self.cancel = threading.Event()
        self._scheduler: Any = None
        self._start = clock_start
        self.stopped = threading.Event()
        #: substrates that can't run at all (their emulation failed to start): why
        self._unusable: dict[str, str] = {}
        #: what it stored, as Prometheus metrics, served at `metrics_url` while it runs
        self.metrics = prometheus.Metrics(objectives=config.slos)
        self._spool = Spool(config.database, self.compose.store, on_saved=self.metrics.observe)
        self._endpoint: prometheus.Endpoint | None = None
        #: posts incident alerts while it runs (None: no webhook configured)
        self.notifier: alerts.Notifier | None = None
        #: where its rollouts run (`rtax.rollouts.engines`: these threads, or a Ray cluster)
        self.engine = engines.make(config.engine, self.compose, self.cancel)
        #: the probe slots, today's budgets and the one writer of records
        self.dispatcher = Dispatcher(config, self.compose, self.engine, self._spool, self.stopped)

    @property
    def emulations(self) -> list[Any]:
        """The emulations this scheduler started for its ``emulate = true`` substrates (it
        never borrows those of an ``rtax emulate``, whose endpoints could go away under a
        long-running schedule); they stop with it."""
        return self.compose.started

    # -- life ------------------------------------------------------------------------------

    def start(self) -> None:
        """Take the lock, check the substrates, reap orphans, then schedule every plan."""
        from apscheduler.events import EVENT_JOB_MISSED, EVENT_JOB_SUBMITTED
        from apscheduler.executors.pool import ThreadPoolExecutor
        from apscheduler.schedulers.background import BackgroundScheduler
        from apscheduler.triggers.interval import IntervalTrigger

        self.config.database.parent.mkdir(parents=True, exist_ok=True)
        self.lock.acquire()
        settled = memory.settle()  # before any worker thread allocates (rtax.service.memory)
        if settled:
            log.info("allocators set for a long run: %s", ", ".join(settled))
        try:
            with self.compose.store() as store:  # create and migrate once, up front
                self.metrics.seed(store)  # the last probes before this start
                self._spool.replay(store)  # and write what an earlier run had to spool
            self._endpoint = prometheus.serve(self.metrics, self.config.metrics, log)
            self.notifier = alerts.start(self.config.database, self.config.alerts)
            self.compose.fixture()  # built once, before any rollout needs it
            self.engine.start()
            self._unusable = self.compose.start_emulations(log.info)
            self._check_substrates()
            self._reap()
            self._scheduler = BackgroundScheduler(
                # a worker per plan, and one each for the reaper, retention and detection (the
                # first two wait for a probe slot; detection must not wait behind them)
                executors={"default": ThreadPoolExecutor(len(self.config.plans) + 3)},
                job_defaults={
                    "coalesce": True,
                    "max_instances": 1,
                    "misfire_grace_time": int(self.config.misfire_grace_s),
                },
                timezone="UTC",
            )
            self._scheduler.add_listener(self._on_submitted, EVENT_JOB_SUBMITTED)
            self._scheduler.add_listener(self._on_missed, EVENT_JOB_MISSED)
            first = self._start or datetime.now(UTC)
            for i, plan in enumerate(self.config.plans):
                self._due[plan.name] = []
                self._scheduler.add_job(
                    self.run_plan,
                    IntervalTrigger(seconds=plan.interval_s, jitter=plan.jitter_s or None),
                    args=[plan],
                    id=plan.name,
                    name=plan.name,
                    next_run_time=first + timedelta(seconds=2 * i),  # staggered first runs
                )
            self._scheduler.add_job(
                self.run_reaper,
                IntervalTrigger(seconds=self.config.reap_interval_s),
                id="reaper",
                name="reaper",
                next_run_time=first + timedelta(seconds=self.config.reap_interval_s),
            )
            self._scheduler.add_job(
                self.run_retention,
                IntervalTrigger(hours=1),
                id="retention",
                name="retention",
                next_run_time=first + timedelta(seconds=60),
            )
            self._scheduler.add_job(
                self.run_detection,
                IntervalTrigger(seconds=self.config.detection.interval_s),
                id="detection",
                name="detection",
                next_run_time=first + timedelta(seconds=self.config.detection.interval_s),
            )
            self._scheduler.start()
            log.info(
                "scheduler started: %d plans, database %s",
                len(self.config.plans),
                self.config.database,
            )
        except BaseException:
            self._close()
            self.lock.release()
            raise

    def serve(self, until: threading.Event | None = None) -> None:
        """`start`, then run until interrupted (Ctrl-C or SIGTERM raise out of the wait, and
        set `until`, in case the exception was lost), then `stop`: rollouts in flight end at
        their next step, clean up and are not recorded; the lock goes last, so no second
        scheduler can overlap this one."""
        self.start()
        try:
            while not self.stopped.is_set() and not (until is not None and until.is_set()):
                self.stopped.wait(0.25)  # supervising the two flags, not timing anything
        finally:
            self.stop(wait=True)

    @property
    def metrics_url(self) -> str | None:
        """Where `/metrics` is served (None: disabled, or its port could not be had)."""
        return self._endpoint.url if self._endpoint else None

    def _close(self) -> None:
        """End the composition: T2's git servers, then the emulations this scheduler started;
        and stop serving metrics."""
        if self._endpoint is not None:
            self._endpoint.stop()
            self._endpoint = None
        if self.notifier is not None:
            self.notifier.stop()  # what it has not sent stays pending in the database
            self.notifier = None
        try:
            self.engine.close()  # what is still in flight is cancelled and not recorded
        except Exception:
            log.exception("the %s engine did not close cleanly", self.engine.name)
        try:
            self.compose.close()
        except RuntimeError as exc:  # an emulation that could not stop cleanly: said, not fatal
            log.error("%s", exc)

    def stop(self, wait: bool = True) -> None:
        """Stop scheduling, end rollouts in flight at their next step (they clean up and are
        not recorded), then release the git servers, the emulations and the lock, in that
        order."""
        self.stopped.set()
        self.cancel.set()
        if self._scheduler is not None:
            self._scheduler.shutdown(wait=wait)
            self._scheduler = None
        self._close()
        self.lock.release()

    def _on_submitted(self, event: Any) -> None:
        """Remember when a plan's run was due; `run_plan` takes it as its `scheduled_at`."""
        if event.job_id in self._due and event.scheduled_run_times:
            with self._due_changed:
                self._due[event.job_id].append(event.scheduled_run_times[-1])
                self._due_changed.notify_all()

    def _on_missed(self, event: Any) -> None:
        """A run too late for the misfire grace never starts: forget its due time."""
        with self._due_changed:
            due = self._due.get(event.job_id, [])
            if event.scheduled_run_time in due:
                due.remove(event.scheduled_run_time)

    def _take_due(self, plan: str) -> datetime | None:
        """The newest due time of `plan` (waiting briefly for its submission event, which
        APScheduler sends just after handing the run to a worker)."""
        with self._due_changed:
            self._due_changed.wait_for(lambda: bool(self._due[plan]), timeout=5)
            due = self._due[plan]
            if not due:
                return None
            newest = max(due)
            due.clear()
            return newest

    def _check_substrates(self) -> None:
        """Prepare every substrate; a warm pool is filled once per action mode its plans use
        (so the first claim finds it full), and not at all when no plan uses it."""
        for name, conf in self.config.substrates.items():
            if name in self._unusable:
                self.enabled[name] = False
                log.warning("substrate %s is skipped (optional): %s", name, self._unusable[name])
                continue
            modes = {p.mode for p in self.config.plans if name in p.substrates}
            try:
                say = lambda m, n=name: log.info("%s: %s", n, m)  # noqa: E731
                entry = self.compose.entry(name)
                if not conf.pool or not modes:
                    self.engine.prepare(entry, say)
                # a warm pool (the local engine only: [engine] refuses pools on Ray) is filled
                # here, once per action mode, so that the first claim finds it full
                for mode in sorted(modes, key=str) if conf.pool else []:
                    self.compose.for_rollouts(entry, {"mode": mode} if mode else {}).prepare(say)
                self.enabled[name] = True
            except Exception as exc:
                if not conf.optional:
                    raise
                self.enabled[name] = False
                log.warning("substrate %s is skipped (optional, not usable here): %s", name, exc)

    def _reap(self) -> list[reaper.Orphan]:
        """Remove the expired and orphaned environments of every enabled substrate, wherever
        the engine's rollouts leave them (on every Ray node); what can't be built, listed or
        removed is logged and skipped, never fatal."""
        confs = []
        for name in self.config.substrates:
            if self.enabled.get(name):
                try:
                    confs.append(self.compose.entry(name))
                except Exception as exc:
                    log.warning("reaper: cannot use %s: %s: %s", name, type(exc).__name__, exc)
        return self.engine.sweep(confs, log)

    def run_reaper(self) -> None:
        """The periodic reap (every ``reap_interval``), holding a probe slot so that removals
        never overlap a measurement; whatever fails is logged, the monitor goes on."""
        with self.dispatcher.slots:
            if self.stopped.is_set():
                return
            try:
                self._reap()
            except Exception:
                log.exception("reaper failed; it runs again in %g s", self.config.reap_interval_s)

    def run_retention(self) -> None:
        """Fold raw samples past the retention age into rollups (holding a probe slot, so the
        disk work never overlaps a measurement)."""
        from rtax.store import retention

        with self.dispatcher.slots, self.compose.store() as store:
            try:
                report = retention.fold(
                    store,
                    older_than_days=self.config.retention.raw_days,
                    bucket=self.config.retention.bucket,
                )
            except Exception:
                log.exception("retention failed; raw samples kept")
                return
        if report.runs:
            log.info(
                "retention: folded %d runs into %d rollup rows; %d -> %d bytes",
                report.runs,
                report.rollup_rows,
                report.bytes_before,
                report.bytes_after,
            )

    def run_detection(self) -> detection.Report | None:
        """One detection pass (`rtax.service.detection.run`): it holds no probe slot, so probing
        never waits for it; a failure is logged and the monitor goes on. Freed heap pages go
        back to the kernel after it, the job that reads the most (`rtax.service.memory`)."""
        try:
            return detection.run(self.compose.store, self.config, self.notifier, log)
        finally:
            memory.trim()

    # -- one plan, one cycle ---------------------------------------------------------------

    def _cycle(self, plan: Plan) -> list[tuple[str, str | None]]:
        """The rollouts of one cycle: its substrates in a random order, `repeat` rollouts
        each, from each of its vantages in turn (None: wherever the engine places it)."""
        names = [n for n in plan.substrates if self.enabled.get(n)]
        random.shuffle(names)
        vantages = plan.vantages if plan.vantages is not None else self.config.engine.vantages
        return [(n, v) for n in names for _ in range(plan.repeat) for v in vantages or (None,)]

    def run_plan(self, plan: Plan) -> None:
        """One cycle of a plan (`_cycle`), at most ``concurrency`` rollouts in flight at once
        (one probe slot each); the cycle ends when its last rollout is stored."""
        scheduled = self._take_due(plan.name)
        flying: list[Future[RolloutRecord | None]] = []
        try:
            for name, vantage in self._cycle(plan):
                if self.stopped.is_set():
                    return
                conf = self.config.substrates[name]
                try:
                    went = self.dispatcher.dispatch(plan, conf, vantage, scheduled)
                except Exception as exc:  # a failing probe never stops the monitor
                    log.exception("plan %s on %s: could not set up the rollout", plan.name, name)
                    try:
                        self.dispatcher.save_setup_error(
                            plan, conf, scheduled, exc, vantage=vantage
                        )
                    except Exception:
                        log.exception("could not record the setup error")
                    continue
                if went is TOO_LATE:
                    return  # too late for this cycle: skipped, not run late
                if isinstance(went, Future):
                    flying.append(went)
        finally:
            futures.wait(flying)

    # -- keeping every record ----------------------------------------------------------------

    @property
    def spool(self) -> Path:
        """Records the database could not take yet (`rtax.store.spool`), written later."""
        return self._spool.path

    def save(self, record: RolloutRecord) -> None:
        """Store `record`, else spool it (`Dispatcher.save`)."""
        self.dispatcher.save(record)
