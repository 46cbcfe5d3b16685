"""The live prober: an APScheduler background scheduler that runs the configured probe plans.

Why these choices (README.md#scheduler):

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
- Exactly one scheduler per database: an exclusive lock held for the scheduler's lifetime. On
  start it reaps orphans that a crashed scheduler left.
"""

from __future__ import annotations

import fcntl
import json
import logging
import os
import random
import socket
import sqlite3
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from rtax import budget, fixtures, reaper, workloads
from rtax.config import Config, Plan, SubstrateConfig, build_substrate
from rtax.fixtures import Fixture, GitServer
from rtax.probe import (
    UNKNOWN_FIDELITY,
    HarnessError,
    ProbeOptions,
    RolloutRecord,
    failed_record,
    run_rollout,
)
from rtax.store import Store, StoreError
from rtax.substrates import substrate_class
from rtax.substrates.base import Substrate, require_host_address
from rtax.workloads import RepoSource

log = logging.getLogger("rtax.scheduler")

#: How long a stop waits for a rollout in flight to end and clean up before leaving it: rollouts
#: end at their next step (README.md#scheduler); this bounds one stuck in a long substrate call.
STOP_GRACE_S = 3.0

#: Builds a substrate from its configuration (injectable: tests hand in their own).
Factory = Callable[[SubstrateConfig, dict[str, Any]], Substrate]


def configured_fidelity(conf: SubstrateConfig) -> str:
    """The fidelity a row of `conf` carries when its substrate could not be built: what the
    configuration says (``emulate = true`` sets ``emulated``), else what the kind always is
    (``local`` and ``docker`` are real by construction), else `UNKNOWN_FIDELITY`: never a
    silent ``real`` for a cloud kind whose endpoint nobody has seen answer."""
    if conf.emulate:
        return "emulated"
    if isinstance(conf.params.get("fidelity"), str):
        return conf.params["fidelity"]
    try:
        declared = getattr(substrate_class(conf.kind), "fidelity", None)
    except Exception:
        declared = None
    return declared if isinstance(declared, str) else UNKNOWN_FIDELITY


class LockHeld(RuntimeError):
    """Another scheduler already owns this database."""


class SchedulerLock:
    """An exclusive flock on ``<database>.scheduler.lock`` for the scheduler's lifetime.

    The kernel drops a flock when its process dies, however it dies, so a crashed scheduler
    never blocks the next one."""

    def __init__(self, database: Path) -> None:
        self.path = Path(f"{database}.scheduler.lock")
        self._fd: int | None = None

    def acquire(self) -> None:
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 512, 0).decode(errors="replace").strip() or "unknown"
            os.close(fd)
            raise LockHeld(
                f"another scheduler already runs on this database ({holder}); lock: {self.path}"
            ) from None
        os.ftruncate(fd, 0)
        os.pwrite(
            fd,
            f"pid {os.getpid()} on {socket.gethostname()} since "
            f"{datetime.now(UTC).isoformat(timespec='seconds')}".encode(),
            0,
        )
        self._fd = fd

    def release(self) -> None:
        if self._fd is not None:
            fcntl.flock(self._fd, fcntl.LOCK_UN)
            os.close(self._fd)
            self._fd = None


class Prober:
    """Runs the plans of a `Config` on a background scheduler, writing every rollout."""

    def __init__(
        self,
        config: Config,
        *,
        factory: Factory = build_substrate,
        fixture: Fixture | None = None,
        clock_start: datetime | None = None,
    ) -> None:
        self.config = config
        self.factory = factory
        self.fixture = fixture
        self.lock = SchedulerLock(config.database)
        self.slots = threading.BoundedSemaphore(config.concurrency)
        self.enabled: dict[str, bool] = {}
        self.servers: dict[str, GitServer] = {}
        self._due: dict[str, list[datetime]] = {}
        self._due_changed = threading.Condition()
        self.cancel = threading.Event()
        self._scheduler: Any = None
        self._servers_lock = threading.Lock()
        self._start = clock_start
        self.stopped = threading.Event()
        #: emulations this scheduler started for its `emulate = true` substrates; they stop
        #: with it
        self.emulations: list[Any] = []
        #: rollouts running now, per substrate name (monotonic start times), so that budgets
        #: count them before they are stored; guarded by `_budget_lock`
        self._in_flight: dict[str, list[float]] = {}
        self._budget_lock = threading.Lock()
        #: optional substrates that can't run at all (their emulation failed to start): why
        self._unusable: dict[str, str] = {}
        self._spool_lock = threading.Lock()

    # -- life ------------------------------------------------------------------------------

    def start(self) -> None:
        """Take the lock, check the substrates, reap orphans, then schedule every plan."""
        from apscheduler.events import EVENT_JOB_MISSED, EVENT_JOB_SUBMITTED
        from apscheduler.executors.pool import ThreadPoolExecutor
        from apscheduler.schedulers.background import BackgroundScheduler
        from apscheduler.triggers.interval import IntervalTrigger

        self.config.database.parent.mkdir(parents=True, exist_ok=True)
        self.lock.acquire()
        try:
            with Store(self.config.database) as store:  # create and migrate once, up front
                self._drain(store)  # and write what an earlier run had to spool
            if self.fixture is None:
                self.fixture = fixtures.build()
            self._attach_emulations()
            self._check_substrates()
            self._reap()
            self._scheduler = BackgroundScheduler(
                executors={"default": ThreadPoolExecutor(max(len(self.config.plans), 1))},
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
                self.run_retention,
                IntervalTrigger(hours=1),
                id="retention",
                name="retention",
                next_run_time=first + timedelta(seconds=60),
            )
            self._scheduler.start()
            log.info(
                "scheduler started: %d plans, database %s",
                len(self.config.plans),
                self.config.database,
            )
        except BaseException:
            self._stop_emulations()
            self.lock.release()
            raise

    def _attach_emulations(self) -> None:
        """Start the emulation of every kind an `emulate = true` substrate names, for this
        scheduler's life, and point those substrates at it (their samples are labelled
        ``emulated``; the emulation owns endpoint and credentials, `emulation.overlay`).

        The scheduler owns its emulations rather than borrowing those of a running
        ``rtax emulate``, whose endpoints could vanish or move under a long-running schedule.
        An emulation that can't start disables its substrates if they are all optional (a
        failing probe never takes the monitor down), else stops the start-up."""
        wanted = sorted({c.kind for c in self.config.substrates.values() if c.emulate})
        if not wanted:
            return
        from rtax import emulation

        served: dict[str, dict[str, Any]] = {}
        for kind in wanted:
            users = [c for c in self.config.substrates.values() if c.emulate and c.kind == kind]
            try:
                started = emulation.start_all([kind], log=log.info)
            except Exception as exc:
                if not all(c.optional for c in users):
                    raise
                for conf in users:
                    self._unusable[conf.name] = f"its {kind} emulation could not start: {exc}"
                continue
            self.emulations.extend(started)
            served[kind] = started[0].substrate_params()
        substrates = {
            name: replace(conf, params=emulation.overlay(served[conf.kind], conf.params))
            if conf.emulate and conf.kind in served
            else conf
            for name, conf in self.config.substrates.items()
        }
        self.config = replace(self.config, substrates=substrates)

    def _stop_emulations(self) -> None:
        if self.emulations:
            from rtax import emulation

            try:
                emulation.stop_all(self.emulations)
            except RuntimeError as exc:
                log.error("%s", exc)
            self.emulations = []

    def stop(self, wait: bool = True) -> None:
        """Stop scheduling, end rollouts in flight at their next step (they clean up and are
        not recorded), then release the git servers and the lock, in that order."""
        self.stopped.set()
        self.cancel.set()
        if self._scheduler is not None:
            self._scheduler.shutdown(wait=wait)
            self._scheduler = None
        for server in self.servers.values():
            server.stop()
        self.servers.clear()
        self._stop_emulations()
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
        for name, conf in self.config.substrates.items():
            if name in self._unusable:
                self.enabled[name] = False
                log.warning("substrate %s is skipped (optional): %s", name, self._unusable[name])
                continue
            try:
                self.factory(conf, {}).prepare(lambda m, n=name: log.info("%s: %s", n, m))
                self.enabled[name] = True
            except Exception as exc:
                if not conf.optional:
                    raise
                self.enabled[name] = False
                log.warning("substrate %s is skipped (optional, not usable here): %s", name, exc)

    def _reap(self) -> None:
        substrates = []
        for name, conf in self.config.substrates.items():
            if self.enabled.get(name):
                substrates.append(self.factory(conf, {}))

        def skip(name: str, exc: Exception) -> None:  # a listing failure never stops start-up
            log.warning("could not list %s leftovers: %s: %s", name, type(exc).__name__, exc)

        for orphan in reaper.reap(substrates, on_error=skip):
            log.warning(
                "reaped %s leftover %s (run %s): %s",
                orphan.substrate,
                orphan.leftover.env_id,
                orphan.leftover.run_id,
                orphan.reason,
            )

    def run_retention(self) -> None:
        """Fold raw samples past the retention age into rollups (holding a probe slot, so the
        disk work never overlaps a measurement)."""
        from rtax import retention

        with self.slots, Store(self.config.database) as store:
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

    # -- one plan, one cycle ---------------------------------------------------------------

    def run_plan(self, plan: Plan) -> None:
        """One cycle of a plan: its substrates in a random order, `repeat` rollouts each."""
        scheduled = self._take_due(plan.name)
        names = [n for n in plan.substrates if self.enabled.get(n)]
        random.shuffle(names)
        for name in names:
            for _ in range(plan.repeat):
                if self.stopped.is_set():
                    return
                try:
                    if not self._one(plan, self.config.substrates[name], scheduled):
                        return  # too late for this cycle: skipped, not run late
                except Exception as exc:  # a failing probe never stops the monitor
                    log.exception("plan %s on %s: could not set up the rollout", plan.name, name)
                    try:
                        self._save_setup_error(plan, self.config.substrates[name], scheduled, exc)
                    except Exception:
                        log.exception("could not record the setup error")

    def _over_budget(self, conf: SubstrateConfig, store: Store) -> str | None:
        """Why today's budget of `conf` forbids another rollout, or None."""
        if conf.max_rollouts_per_day is None and conf.max_env_minutes_per_day is None:
            return None
        since = budget.day_start().isoformat(timespec="microseconds")
        # Only spending at this substrate's own fidelity counts: emulated rollouts under the
        # same name (a demo, `rtax emulate`) cost nothing and must not use up a real budget.
        fidelity = "emulated" if conf.emulate else conf.params.get("fidelity", "real")
        spend = store.spend(substrate=conf.name, fidelity=fidelity, since=since)
        rollouts, minutes = budget.spent(spend, conf.name)
        # Rollouts still running are not in the database yet: count them, and the minutes
        # their environments have used so far (the caller holds the budget lock).
        running = self._in_flight.get(conf.name, [])
        rollouts += len(running)
        minutes += sum(time.monotonic() - t for t in running) / 60
        return budget.exceeded(conf, rollouts, minutes)

    def _one(self, plan: Plan, conf: SubstrateConfig, scheduled: datetime | None) -> bool:
        """One rollout; False when the cycle is already later than the misfire grace (or the
        scheduler stopped while this waited for a slot)."""
        with self.slots:
            if self.stopped.is_set():
                return False
            if scheduled is not None:
                late = (datetime.now(UTC) - scheduled).total_seconds()
                if late > self.config.misfire_grace_s:
                    log.warning(
                        "plan %s: %.0f s late (waiting for a probe slot), past the "
                        "misfire grace; the rest of this cycle is skipped",
                        plan.name,
                        late,
                    )
                    return False
            with self._budget_lock:  # check and count in one step: concurrent plans can't
                with Store(self.config.database) as store:  # both take the last rollout
                    why = self._over_budget(conf, store)
                if why:
                    log.info(
                        "plan %s: %s is over its daily budget (%s); skipped",
                        plan.name,
                        conf.name,
                        why,
                    )
                    return True
                started = time.monotonic()
                self._in_flight.setdefault(conf.name, []).append(started)
            try:
                record = self._rollout(plan, conf, scheduled)
            finally:
                with self._budget_lock:
                    self._in_flight[conf.name].remove(started)
            if record is None:
                return True
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
        return True

    def _rollout(
        self, plan: Plan, conf: SubstrateConfig, scheduled: datetime | None
    ) -> RolloutRecord | None:
        """Run one rollout and store it; None when it was cancelled (stopping)."""
        overrides = {"mode": plan.mode} if plan.mode else {}
        substrate = self.factory(conf, overrides)  # failing: a setup error (`run_plan`)
        try:
            source = self._source(substrate) if plan.tier == "T2" else None
            workload = workloads.build(plan.tier, steps=plan.steps, seed=0, source=source)
        except Exception as exc:
            log.exception("plan %s on %s: could not set up the rollout", plan.name, conf.name)
            return self._save_setup_error(plan, conf, scheduled, exc, substrate.fidelity)
        record = self._run_with_deadline(substrate, workload)
        if record is None or record.run["error_class"] == "cancelled":
            return None  # stopping: half a rollout is no sample, and no failure either
        record.run["plan"] = plan.name
        if scheduled is not None:
            record.run["scheduled_at"] = scheduled.astimezone(UTC).isoformat(
                timespec="microseconds"
            )
        self.save(record)
        return record

    # -- keeping every record ----------------------------------------------------------------

    @property
    def spool(self) -> Path:
        """Records the database could not take yet (one JSON object a line), written later."""
        return Path(f"{self.config.database}.spool.jsonl")

    def save(self, record: RolloutRecord) -> None:
        """Store `record`, after any spooled earlier; if the database is busy or unavailable
        (past sqlite's own 30 s busy wait), spool it: a record is never lost to rtax's own
        trouble (README.md#failure-classes)."""
        with self._spool_lock:
            try:
                with Store(self.config.database) as store:
                    self._drain(store)
                    store.save_rollout(record)
                return
            except (StoreError, sqlite3.Error, OSError) as exc:
                log.error("database unavailable (%s): run %s spooled", exc, record.run["run_id"])
            line = json.dumps({"run": record.run, "actions": record.actions}, default=str)
            with self.spool.open("a") as out:
                out.write(line + "\n")
                out.flush()
                os.fsync(out.fileno())

    def _drain(self, store: Store) -> None:
        """Write the spooled records (each once: the file is rewritten with those left)."""
        if not self.spool.exists():
            return
        lines = [line for line in self.spool.read_text().splitlines() if line.strip()]
        for i, line in enumerate(lines):
            entry = json.loads(line)
            try:
                store.save_rollout(RolloutRecord(run=entry["run"], actions=entry["actions"]))
            except StoreError as exc:
                if "UNIQUE" not in str(exc):  # already written (a crash after the insert)
                    self.spool.write_text("".join(f"{rest}\n" for rest in lines[i:]))
                    raise
        self.spool.unlink()
        log.info("wrote %d spooled records", len(lines))

    def _save_setup_error(
        self,
        plan: Plan,
        conf: SubstrateConfig,
        scheduled: datetime | None,
        exc: Exception,
        fidelity: str | None = None,
    ) -> RolloutRecord:
        """A rollout that could not even start is a failure too: it is kept as a row. rtax's
        own trouble (its git daemon, its database) is a `harness_error`; anything else (the
        substrate could not be built or reached) a `setup_error`. `fidelity`: the substrate's,
        when it was built."""
        harness = isinstance(exc, (HarnessError, StoreError, sqlite3.Error))
        record = failed_record(
            conf.name,
            conf.kind,
            plan.mode or conf.params.get("mode"),
            plan,
            uuid.uuid4().hex,
            datetime.now(UTC),
            HarnessError.error_class if harness else "setup_error",
            f"{type(exc).__name__}: {exc}",
            wall_s=None,
            fidelity=fidelity or configured_fidelity(conf),
        )
        record.run["plan"] = plan.name
        if scheduled is not None:
            record.run["scheduled_at"] = scheduled.astimezone(UTC).isoformat(
                timespec="microseconds"
            )
        self.save(record)
        return record

    def _source(self, substrate: Substrate) -> RepoSource:
        """T2's repository over git://, served once per address the substrates reach."""
        assert self.fixture is not None
        host = require_host_address(substrate)
        with self._servers_lock:
            server = self.servers.get(host)
            if server is None:
                try:
                    server = GitServer(self.fixture.root, host=host).start()
                except Exception as exc:  # rtax's own server, not the substrate
                    raise HarnessError(f"git daemon on {host}: {exc}") from exc
                self.servers[host] = server
        return RepoSource(
            server.url(self.fixture.bare_repo.name),
            self.fixture.buggy_commit,
            self.fixture.fix_patch,
            self.fixture.failing_test,
        )

    def _run_with_deadline(
        self, substrate: Substrate, workload: workloads.Workload
    ) -> RolloutRecord | None:
        """The rollout's record; None if the scheduler stopped while it was still busy."""
        deadline = self.config.deadline_s
        result: list[RolloutRecord] = []
        started = datetime.now(UTC)
        run_id = uuid.uuid4().hex
        options = ProbeOptions(deadline_s=deadline, cancel=self.cancel)
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
            if self.cancel.is_set():
                # Stopping: the rollout ends at its next step and cleans up; one stuck in a
                # long substrate call is not waited for (the next start's reaper removes what
                # it leaves), so that stopping stays prompt.
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
            "rollout %s on %s still busy after %.0f s: recorded as deadline_exceeded; it "
            "will clean up when it returns",
            run_id,
            substrate.name,
            backstop,
        )
        return failed_record(
            substrate.name,
            substrate.kind,
            substrate.mode,
            workload,
            run_id,
            started,
            "deadline_exceeded",
            f"the rollout did not return within {backstop:.0f} s",
            wall_s=backstop,
            fidelity=substrate.fidelity,
        )
