"""Load runs: sequential, staggered or burst rollouts of a tier on one substrate, as one library
call (``rtax burst``), each rollout stored as usual plus one record of the whole run.

Why this shape (docs/load.md):

- **Concurrency is real.** Every launch has a thread of its own, started before the load's
  first launch is due and released by one event, so a burst is N create requests at once, not
  N thread starts in a row; a staggered launch sleeps until its moment. The threads share one
  substrate (its clients are thread-safe: tests/test_client_threads.py) and one provenance,
  asked once before the clock starts, so the hot path holds only the rollouts' own calls.
- **The client is measured too.** Each launch's dispatch lag (the rollout's create request
  minus the moment it was due) and the process's CPU time over the run (all its threads,
  user and system) go into the record: a lag that grows or a CPU share near one core (the
  interpreter's lock lets Python use about one) says the client, not the substrate, set the
  figures.
- **One writer.** Rollouts come back to the calling thread, which stores each one as it
  finishes through the spool (`rtax.store.spool`), like ``rtax probe``; the load run's own row is
  written before the first launch and finished at the end (`rtax.store.loads`).
- **Nothing leaks on Ctrl-C.** A stop cancels every launch not yet started and every rollout
  at its next step; each cleans up, and the call returns once all have (a rollout stuck in a
  call is waited for up to its cleanup timeout, then left labelled for the reaper). Rollouts
  that ended after the stop are not stored (half a load is no sample); the load run is
  marked ``interrupted``.
"""

from __future__ import annotations

import os
import queue
import resource
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from rtax.analysis.loadrun import Launch, describe, figures
from rtax.compose import Composition, check_database
from rtax.core import paths, workloads
from rtax.core.failures import HarnessError
from rtax.core.options import RolloutOptions
from rtax.core.provenance import origin, provenance_of
from rtax.core.record import RolloutRecord, failed_record, utcnow
from rtax.rollouts.outcome import Outcome, progress_bar, summary
from rtax.rollouts.rollout import identity, run_rollout
from rtax.settings import config
from rtax.settings.loads import LoadError, LoadPlan
from rtax.store.database import Store, StoreError
from rtax.store.spool import RETRY_PAUSES_S, Spool, is_busy
from rtax.substrates.base import Substrate, clock, launch_type

#: How long a stop waits, past the cleanup timeout, for rollouts still in flight.
STOP_GRACE_S = 10.0


@dataclass(kw_only=True)
class BurstResult(Outcome):
    """A finished (or interrupted) load run: its stored row and its rollouts' records."""

    plan: LoadPlan
    load_id: str
    row: dict[str, Any] = field(default_factory=dict)
    #: rollouts still in flight when the stop's wait ended (left labelled for the reaper)
    abandoned: int = 0

    def summary(self) -> str:
        """The load run's figures, then the per-phase table of its rollouts."""
        return "\n".join([*describe(self.row), summary(self.records, self.db)])


def named(name: str, config_path: Path | None = None) -> LoadPlan:
    """The ``[[loads]]`` entry called `name` in the configuration."""
    conf = config.load(config_path)
    for plan in conf.loads:
        if plan.name == name:
            return plan
    known = ", ".join(p.name or "" for p in conf.loads) or "none"
    raise LoadError(f"no load {name!r} in {conf.path} (defined: {known})")


def burst(
    plan: LoadPlan,
    *,
    db: Path | None = None,
    config: Path | None = None,
    deadline: float = 3600.0,
    seed: int = 0,
    log: Callable[[str], None] | None = None,
    progress: bool = False,
    stop: threading.Event | None = None,
) -> BurstResult:
    """Run `plan` on its substrate (configured in `config`, else built in), store every
    rollout in `db` (default: the configuration's, else data/rtax.db) linked to one load run,
    and return it. Mistakes are one-line errors before any slow work. `stop`, once set, ends
    the run like Ctrl-C."""
    plan.check()
    check_database(db)
    with Composition(config_path=config, database=db, log=log) as composition:
        sub = composition.substrate(plan.substrate, mode=plan.mode)
        composition.fixture()
        composition.ready(sub, log or (lambda _: None), t2=plan.tier == "T2")
        result = BurstResult(
            composition.database if composition.database is not None else paths.default_db(),
            plan=plan,
            load_id=uuid.uuid4().hex,
        )
        spool = Spool(result.db, composition.store, on_saved=result.saved)
        with composition.store() as store:
            result.replayed = spool.replay(store)
            source = composition.source(sub) if plan.tier == "T2" else None
            workload = workloads.build(plan.tier, steps=plan.steps, seed=seed, source=source)
            run(
                sub,
                workload,
                plan,
                store=store,
                spool=spool,
                result=result,
                options=RolloutOptions(deadline_s=deadline),
                progress=progress,
                stop=stop,
            )
    return result


def run(
    sub: Substrate,
    workload: workloads.Workload,
    plan: LoadPlan,
    *,
    store: Store,
    spool: Spool,
    result: BurstResult,
    options: RolloutOptions | None = None,
    progress: bool = False,
    stop: threading.Event | None = None,
) -> BurstResult:
    """Run `plan`'s launches of `workload` on a prepared `sub`, storing each rollout through
    `spool` into `store` and the load run's row, as `result.load_id`; fills and returns
    `result`. What `burst` does once it has put the parts together."""
    try:
        provenance = provenance_of(sub)  # once: the hot path holds no describe()
    except Exception as exc:
        raise HarnessError(f"provenance: {type(exc).__name__}: {exc}") from exc
    runner = _Runner(sub, workload, plan, options or RolloutOptions(), provenance)
    store.loads.begin(_identity(result.load_id, plan, sub))
    with progress_bar(plan.n, plan.describe(), enabled=progress) as bar:
        runner.run(store, spool, result, bar, stop)
    if spool.pending:
        result.last_try(spool, store)
    result.row = _finish(store, result.load_id, runner, result)
    return result


def _identity(load_id: str, plan: LoadPlan, sub: Substrate) -> dict[str, Any]:
    """What a load run is, written before its first launch."""
    return {
        "load_id": load_id,
        "name": plan.name,
        "substrate": sub.name,
        "kind": sub.kind,
        "mode": sub.mode or "exec",
        "fidelity": sub.fidelity,
        "tier": plan.tier,
        "steps": plan.steps,
        "shape": plan.shape,
        "n": plan.n,
        "every_s": plan.every_s,
        "launch_type": launch_type(sub),
        "started_at": utcnow(),
        "host_cpus": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None,
        **origin(),
    }


def harness_cpu_s() -> float:
    """CPU seconds this process has used, all its threads together (user and system). Child
    processes are not counted: the local floor's commands are the workload, not the client."""
    own = resource.getrusage(resource.RUSAGE_SELF)
    return own.ru_utime + own.ru_stime


class _Runner:
    """The launches of one load run, their threads and the results they hand back."""

    def __init__(
        self,
        sub: Substrate,
        workload: workloads.Workload,
        plan: LoadPlan,
        options: RolloutOptions,
        provenance: dict[str, Any],
    ) -> None:
        self.sub, self.workload, self.plan = sub, workload, plan
        #: set on a stop: every launch not yet started is skipped, every rollout ends at its
        #: next step (the caller's own event, when its options carry one)
        self.cancel = options.cancel or threading.Event()
        self.options = replace(options, cancel=self.cancel)
        self.provenance = provenance
        self.launches = [Launch(i, scheduled=0.0) for i in range(plan.n)]
        self.results: queue.Queue[tuple[Launch, RolloutRecord | None]] = queue.Queue()
        self.go = threading.Event()
        #: when the first launch was due (set again at the release; here for a stop before it)
        self.wall_go, self.t_go = datetime.now(UTC), clock()
        self.cpu_s = 0.0
        self.end = 0.0
        self.threads: list[threading.Thread] = []

    # -- worker threads ------------------------------------------------------------------------

    def _rollout(self, launch: Launch) -> RolloutRecord | None:
        options = replace(self.options, on_start=lambda t: setattr(launch, "started", t))
        run_id = uuid.uuid4().hex
        try:
            return run_rollout(
                self.sub, self.workload, run_id=run_id, options=options, provenance=self.provenance
            )
        except Exception as exc:  # rtax's own failure, kept as a row like any other
            return failed_record(
                identity(self.sub, self.workload),
                run_id,
                self.wall_go,
                HarnessError.error_class,
                f"load runner: {type(exc).__name__}: {exc}",
                wall_s=None,
            )

    def _one(self, launch: Launch, offset: float) -> None:
        record = None
        try:
            self.go.wait()
            launch.scheduled = self.t_go + offset
            delay = launch.scheduled - clock()
            if not self.cancel.is_set() and not (delay > 0 and self.cancel.wait(delay)):
                record = self._rollout(launch)
        finally:
            self.results.put((launch, record))

    def _sequence(self) -> None:
        self.go.wait()
        due = self.t_go
        for launch in self.launches:
            record = None
            try:
                launch.scheduled = due
                if not self.cancel.is_set():
                    record = self._rollout(launch)
            finally:
                self.results.put((launch, record))
            due = clock()  # the next launch is due as this one ends

    def _start_threads(self) -> None:
        offsets = self.plan.offsets()
        if offsets is None:
            targets = [(self._sequence, ())]
        else:
            targets = [
                (self._one, (launch, o)) for launch, o in zip(self.launches, offsets, strict=True)
            ]
        for i, (target, args) in enumerate(targets):
            thread = threading.Thread(target=target, args=args, name=f"load-{i}", daemon=True)
            thread.start()
            self.threads.append(thread)

    # -- the calling thread: release, collect, store -------------------------------------------

    def run(
        self,
        store: Store,
        spool: Spool,
        result: BurstResult,
        bar: Any,
        stop: threading.Event | None,
    ) -> None:
        """Start the threads, release the launches, store each rollout as it comes back."""
        received: set[int] = set()
        cpu0 = harness_cpu_s()
        try:
            self._start_threads()
            cpu0 = harness_cpu_s()
            self.wall_go, self.t_go = datetime.now(UTC), clock()
            self.go.set()
            while len(received) < len(self.launches):
                if (stop is not None and stop.is_set()) or self.cancel.is_set():
                    raise KeyboardInterrupt  # the CLI's flag, or the caller's own cancel
                try:
                    launch, record = self.results.get(timeout=0.2)
                except queue.Empty:
                    bar.set_postfix_str(self._status(received, result))
                    continue
                received.add(launch.index)
                if record is not None and not self.cancel.is_set():
                    self._store(launch, record, store, spool, result)
                bar.set_postfix_str(self._status(received, result))
                bar.update(1)
        except KeyboardInterrupt as exc:
            result.interrupted = exc
            self.cancel.set()
            self.go.set()  # launches not yet released see the stop at once
            result.abandoned = self._wait_out()
        self.end, self.cpu_s = clock(), harness_cpu_s() - cpu0

    def _store(
        self, launch: Launch, record: RolloutRecord, store: Store, spool: Spool, result: BurstResult
    ) -> None:
        due = self.wall_go + timedelta(seconds=launch.scheduled - self.t_go)
        record.run.update(
            load_id=result.load_id,
            load_index=launch.index,
            scheduled_at=due.isoformat(timespec="microseconds"),
        )
        launch.run = record.run
        result.keep(record, spool, store)  # retried, else spooled

    def _status(self, received: set[int], result: BurstResult) -> str:
        flight = sum(
            launch.started is not None and launch.index not in received for launch in self.launches
        )
        return f"in flight {flight}, failed {result.failed}"

    def _wait_out(self) -> int:
        """After a stop: wait for every rollout to end and clean up (a second Ctrl-C is not
        an exit: cleaning up is the point); return how many were still busy at the bound."""
        bound = clock() + self.options.cleanup_timeout_s + STOP_GRACE_S
        for thread in self.threads:
            while thread.is_alive() and clock() < bound:
                try:
                    thread.join(min(0.2, max(bound - clock(), 0)))
                except KeyboardInterrupt:
                    continue
        return sum(t.is_alive() for t in self.threads)


def _finish(store: Store, load_id: str, runner: _Runner, result: BurstResult) -> dict[str, Any]:
    """Write the load run's figures and status; a busy database is retried like a rollout."""
    measured = figures(
        runner.launches,
        start=runner.t_go,
        planned=runner.plan.n,
        cpu_s=runner.cpu_s,
        end=runner.end,
    )
    measured.update(
        started_at=runner.wall_go.isoformat(timespec="microseconds"),
        ended_at=utcnow(),
        status="interrupted" if result.interrupted is not None else "complete",
    )
    for attempt, pause in enumerate((0.0, *RETRY_PAUSES_S)):
        time.sleep(pause)
        try:
            store.loads.finish(load_id, measured)
            break
        except Exception as exc:  # the database busy past its busy timeout: try again
            if not is_busy(exc) or attempt == len(RETRY_PAUSES_S):
                raise StoreError(f"cannot finish load run {load_id}: {exc}") from exc
    return {**store.loads.read(load_id=load_id).iloc[0].to_dict()}


def plan_of(load: str | None, config_path: Path | None = None, **flags: Any) -> LoadPlan:
    """The plan `rtax burst` runs: the ``[[loads]]`` entry `load` (if given) with the `flags`
    that are not None put over it, else the flags over the defaults (a burst of 20 T0
    rollouts on ``local``); checked."""
    given = {k: v for k, v in flags.items() if v is not None}
    unknown = set(given) - {"substrate", "tier", "steps", "shape", "n", "every_s", "mode"}
    if unknown:
        raise TypeError(f"not a load plan flag: {', '.join(sorted(unknown))}")
    base = named(load, config_path) if load is not None else LoadPlan(substrate="local")
    if given.get("shape") not in (None, "staggered") and "every_s" not in given:
        given["every_s"] = None  # a plan made burst or sequential keeps no launch interval
    return replace(base, **given).check()
