"""The probe runner: one rollout on one substrate, timed phase by phase, as a finished record.

Why it is built this way (docs/measurement.md):

- Phases are consecutive and timed around the substrate's own calls with one monotonic clock, so
  create + orchestration + ready + setup + actions + cleanup never exceeds the wall time. What is
  left over, `overhead`, is the harness's own cost (bookkeeping between calls); it is recorded and
  shown, never folded into a phase.
- Every command is a raw sample (an action row), ready attempts and setup included.
- Where the end of a phase or action was learned by polling, the poll gap at detection is kept
  beside it as its resolution (``<phase>_res_s``, an action's ``resolution_s``;
  docs/measurement.md#resolution): the substrate reports it through `Environment.resolution` and
  `CommandResult.resolution_s`, the ready retry loop is the runner's own poll.
- A failure is classified, cleanup is still attempted and timed, and the row is kept. A rollout
  interrupted by the user (Ctrl-C) is cleaned up and then *not* recorded: half a rollout is no
  sample. The record is returned whole and the store writes it in one transaction.

The runner knows nothing about any one substrate: it only calls the `Substrate` protocol (and
`Claims.claim` of a substrate that launches its environments another way: a warm pool's claim, a
restore from a snapshot, a resume; that phase then replaces create and orchestration, the
first `true` is the ready phase on every launch type, and the run is labelled with the launch
type). It times; what a row holds and what is derived from the timings is `rtax.core.record`'s.
"""

from __future__ import annotations

import dataclasses
import time
import uuid
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from rtax.core.failures import (
    Cancelled,
    CleanupFailed,
    DeadlineExceeded,
    HarnessError,
    OutputLost,
    ReadyTimeout,
    SubstrateError,
    WorkloadFailed,
    ready_refusal_is_final,
)
from rtax.core.options import RolloutOptions
from rtax.core.provenance import provenance_of
from rtax.core.record import (
    ACTION_PHASE,
    LAUNCH_PHASE,
    RolloutIdentity,
    RolloutRecord,
    Timings,
    action_row,
    failed_record,
    run_row,
    utcnow,
)
from rtax.core.workloads import Action, Workload
from rtax.substrates.base import (
    READY_COMMAND,
    Claims,
    CommandResult,
    Environment,
    PreparesLaunch,
    Substrate,
    clock,
    launch_type,
)
from rtax.substrates.poll import poll

#: Output kept on a failed action, for the error message; full output is never stored.
_DETAIL_CHARS = 400


def lost_output(action: Action, result: CommandResult) -> bool:
    """Whether a failed check is the substrate losing the output, not the workload failing:
    the command exited 0, the action expects output, and nothing at all came back on either
    stream (a command that breaks says so on stderr or in its exit code)."""
    return (
        result.exit_code == 0
        and bool(action.expect_stdout)
        and not result.stdout
        and not result.stderr
        and not result.stdout_bytes
        and not result.stderr_bytes
    )


def _size(text: str, reported: int | None) -> int:
    """Bytes written: as the substrate counted them, else the UTF-8 size of the text."""
    return reported if reported is not None else len(text.encode("utf-8", "surrogateescape"))


class _Rollout:
    """The mutable state of one rollout while it runs; `record()` freezes it."""

    def __init__(
        self,
        substrate: Substrate,
        workload: Workload,
        run_id: str,
        options: RolloutOptions,
        now: Callable[[], float],
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.sub = substrate
        self.workload = workload
        self.run_id = run_id
        self.opt = options
        self.now = now
        self.sleep = sleep
        self.t0 = now()
        self.phases: dict[str, float] = {}
        #: resolutions the runner itself measured (the ready retry loop)
        self.resolution: dict[str, float] = {}
        self.actions: list[dict[str, Any]] = []
        self.env: Environment | None = None
        self.episode_end: float | None = None
        self.error_class: str | None = None
        self.error_message: str | None = None
        self.cleanup_ok: bool | None = None
        self.n_done = 0
        #: how the environment came (`rtax.substrates.base.launch_type`)
        self.launch_type = launch_type(substrate)
        #: the substrate call in progress, if any: an unclassified exception raised inside one
        #: is the substrate's (its client's or adapter's), anywhere else it is rtax's own
        self.calling: str | None = None

    def call(self, what: str, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """`fn(*args, **kwargs)`, a substrate protocol method, remembered as the call in
        progress."""
        self.calling = what
        try:
            result = fn(*args, **kwargs)
        except SubstrateError:
            self.calling = None  # classified by the substrate: nothing to attribute
            raise
        # Any other exception leaves `calling` set, for `run_rollout` to attribute it.
        self.calling = None
        return result

    def remaining(self) -> float:
        if self.opt.cancel is not None and self.opt.cancel.is_set():
            raise Cancelled("cancelled: asked to stop (scheduler or CLI)")
        left = self.opt.deadline_s - (self.now() - self.t0)
        if left <= 0:
            raise DeadlineExceeded(f"rollout deadline of {self.opt.deadline_s:g} s passed")
        return left

    def timed(self, phase: str, fn: Callable[[], Any]) -> Any:
        start = self.now()
        try:
            return fn()
        finally:
            self.phases[phase] = self.phases.get(phase, 0.0) + (self.now() - start)

    def command(self, phase: str, index: int, action: Action) -> tuple[int, str]:
        """Run one command as a raw sample; the phase accrues its latency even if it fails."""
        assert self.env is not None
        timeout = min(action.timeout_s, self.remaining())
        row = action_row(
            run_id=self.run_id,
            seq=len(self.actions),
            phase=ACTION_PHASE[phase],
            idx=index,
            category=action.category,
            command=action.command,
            t_offset_s=self.now() - self.t0,
        )
        self.actions.append(row)
        start = self.now()
        try:
            result = self.call("run", self.sub.run, self.env, action.command, timeout)
        except SubstrateError as exc:
            self._accrue(phase, row, start)
            row.update(ok=0, error_class=exc.error_class, detail=str(exc)[:_DETAIL_CHARS])
            raise
        self._accrue(phase, row, start)
        row.update(
            exec_s=result.latency_s,
            resolution_s=result.resolution_s,
            exit_code=result.exit_code,
            stdout_bytes=_size(result.stdout, result.stdout_bytes),
            stderr_bytes=_size(result.stderr, result.stderr_bytes),
        )
        problem = action.check(result.exit_code, result.stdout)
        row["ok"] = int(problem is None)
        if problem is not None and lost_output(action, result):
            row.update(error_class=OutputLost.error_class, detail=problem)
            raise OutputLost(
                f"{phase} {index} ({action.category}): exited 0 with no output at all where "
                f"{action.expect_stdout!r} was expected: the substrate lost it"
            )
        if problem is not None:
            row["error_class"] = getattr(action.failure, "error_class", WorkloadFailed.error_class)
            tail = (result.stderr or result.stdout)[-_DETAIL_CHARS:]
            row["detail"] = f"{problem}: {tail}"
        return result.exit_code, problem or ""

    def _accrue(self, phase: str, row: dict[str, Any], start: float) -> None:
        """A command's latency, on its row and added to its phase."""
        row["latency_s"] = latency = self.now() - start
        self.phases[phase] = self.phases.get(phase, 0.0) + latency

    def ready(self) -> None:
        """Retry the no-op command until it succeeds or the ready timeout passes.

        The phase is the whole span, back-off pauses included: waiting for the environment to
        accept commands is exactly what it measures (the rows keep each attempt's latency)."""
        start = self.now()
        try:
            self._ready_attempts(start + self.opt.ready_timeout_s)
        finally:
            self.phases["ready"] = self.now() - start

    def _ready_attempts(self, deadline: float) -> None:
        """Attempts at a fixed interval (`rtax.substrates.poll`). Readiness happened between
        the last refused attempt and the successful one, so the ready phase's resolution is
        the pause before the successful attempt plus that attempt's own resolution (0 when the
        first attempt succeeded and its answer was not polled for)."""
        attempts = 0
        last = ""

        def attempt() -> dict[str, Any] | None:
            nonlocal attempts, last
            try:
                _, problem = self.command("ready", attempts, Action("ready", READY_COMMAND))
            except (DeadlineExceeded, ReadyTimeout, Cancelled):
                raise  # a stop is not a refusal to retry (docs/measurement.md#failures)
            except SubstrateError as exc:
                if ready_refusal_is_final(exc):
                    raise
                problem = str(exc)
            attempts += 1
            if not problem:
                return self.actions[-1]
            last = problem
            return None

        found = poll(
            attempt,
            interval_s=self.opt.ready_interval_s,
            deadline=deadline,
            timeout=lambda: ReadyTimeout(
                f"no successful {READY_COMMAND!r} after {attempts} "
                f"attempts in {self.opt.ready_timeout_s:g} s: {last}"
            ),
            now=self.now,
            sleep=self.pause,
        )
        self.resolution["ready"] = found.resolution_s + (found.value.get("resolution_s") or 0.0)

    def pause(self, seconds: float) -> None:
        """Sleep (the injected `sleep`), but wake at once when the caller cancels: a stopping
        scheduler must not wait out a pause (docs/configuration.md#scheduler)."""
        cancel = self.opt.cancel
        if cancel is None:
            self.sleep(seconds)
        elif cancel.wait(seconds):
            raise Cancelled("cancelled: asked to stop (scheduler or CLI)")

    def body(self) -> None:
        # The environment may be used until the deadline, then during cleanup: past that
        # (and a grace) its labels say it has expired, and any reaper removes it.
        lifetime = self.opt.deadline_s + self.opt.cleanup_timeout_s
        setup = self.workload.setup
        if isinstance(self.sub, Claims):
            self.start_launched(lifetime)
            setup = self.sub.setup_of(self.env, setup)
        else:
            self.start_cold(lifetime)
        self.phases["ready"] = 0.0
        self.ready()
        for phase, actions in (("setup", setup), ("actions", self.workload.actions)):
            self.phases.setdefault(phase, 0.0)
            for i, action in enumerate(actions):
                _, problem = self.command(phase, i, action)
                if problem:
                    raise (action.failure or WorkloadFailed)(
                        f"{phase} {i} ({action.category}): {problem}"
                    )
                if phase == "actions":
                    self.n_done += 1
        self.episode_end = self.now()

    def start_cold(self, lifetime: float) -> None:
        """create → orchestration: a new environment, until it runs (then ready, as all)."""
        self.env = self.timed(
            "create",
            lambda: self.call("create", self.sub.create, self.run_id, lifetime_s=lifetime),
        )
        self.timed(
            "orchestration",
            lambda: self.call(
                "wait_running",
                self.sub.wait_running,
                self.env,
                min(self.opt.running_timeout_s, self.remaining()),
            ),
        )

    def start_launched(self, lifetime: float) -> None:
        """claim, restore or resume: an environment handed over running, timed in its launch
        type's phase (docs/measurement.md#launch-paths); then ready, as every rollout. It may
        wait as long as a cold start may take."""
        assert isinstance(self.sub, Claims)
        timeout = min(self.opt.running_timeout_s + self.opt.ready_timeout_s, self.remaining())
        phase = LAUNCH_PHASE[self.launch_type]
        self.env = self.timed(
            phase,
            lambda: self.call(
                phase, self.sub.claim, self.run_id, lifetime_s=lifetime, timeout_s=timeout
            ),
        )

    def cleanup(self) -> None:
        if self.env is None:
            return
        try:
            self.timed("cleanup", lambda: self.sub.destroy(self.env, self.opt.cleanup_timeout_s))
            self.cleanup_ok = True
        except Exception as exc:  # any failure to remove is a cleanup failure, kept in the row
            self.cleanup_ok = False
            if self.error_class is None:
                self.error_class = CleanupFailed.error_class
                self.error_message = f"{type(exc).__name__}: {exc}"

    def record(self, started_at: str, provenance: dict[str, Any]) -> RolloutRecord:
        """The finished record; `rtax.core.record.run_row` builds and derives the run row, as it
        does every row. Resolutions: what the substrate reported, then the ready loop's own."""
        milestones = []
        if self.env is not None:
            milestones = [{"name": m.name, "t_s": m.t - self.t0} for m in self.env.milestones]
        if self.env is not None and self.env.rate_limit_waits:
            # what rate limiting cost this sample (the policy is in the substrate's describe)
            waits = [dataclasses.asdict(w) for w in self.env.rate_limit_waits]
            provenance = {**provenance, "rate_limit_waits": waits}
        if self.env is not None and self.env.pool is not None:
            provenance = {**provenance, "pool": self.env.pool}  # how the pool made it
        reported = dict(self.env.resolution) if self.env is not None else {}
        timings = Timings(
            phases=self.phases,
            resolutions={**reported, **self.resolution},
            wall_s=self.now() - self.t0,
            milestones=milestones,
            actions=self.actions,
            launch_type=self.launch_type,
        )
        run = run_row(
            identity(self.sub, self.workload),
            run_id=self.run_id,
            started_at=started_at,
            error_class=self.error_class,
            error_message=self.error_message,
            provenance=provenance,
            timings=timings,
            episode_s=None if self.episode_end is None else self.episode_end - self.t0,
            n_actions_done=self.n_done,
            cleanup_ok=None if self.cleanup_ok is None else int(self.cleanup_ok),
        )
        return RolloutRecord(run=run, actions=self.actions)


def identity(substrate: Substrate, workload: Workload) -> RolloutIdentity:
    """What every row of a rollout of `workload` on `substrate` says it was."""
    return RolloutIdentity(
        substrate=substrate.name,
        kind=substrate.kind,
        fidelity=substrate.fidelity,
        tier=workload.tier,
        steps=workload.steps,
        seed=workload.seed,
        mode=substrate.mode,
        launch_type=launch_type(substrate),
        n_actions=len(workload.actions),
    )


def run_rollout(
    substrate: Substrate,
    workload: Workload,
    *,
    run_id: str | None = None,
    options: RolloutOptions | None = None,
    now: Callable[[], float] = clock,
    provenance: dict[str, Any] | None = None,
    sleep: Callable[[float], None] = time.sleep,
) -> RolloutRecord:
    """Run one rollout and return its record; never raises for a substrate or workload failure.

    KeyboardInterrupt and SystemExit still propagate (after cleanup), so an interrupted rollout
    leaves no row at all. `now` and `sleep` (the ready loop's pause) are injectable for tests;
    `now` must be the clock that substrates mark milestones with.
    """
    run_id = run_id or uuid.uuid4().hex
    launch: dict[str, Any] | None = None
    if isinstance(substrate, PreparesLaunch):
        # e.g. the restore path's snapshot of this tier, made before the clock starts
        try:
            launch = substrate.prepare_for(workload, run_id)
        except (SubstrateError, HarnessError) as exc:
            return failed_record(
                identity(substrate, workload),
                run_id,
                datetime.now(UTC),
                exc.error_class,
                f"{launch_type(substrate)}: {exc}",
                wall_s=None,
            )
    if provenance is None:
        try:
            provenance = provenance_of(substrate)
        except Exception as exc:  # rtax could not say what produced the sample: its failure
            return failed_record(
                identity(substrate, workload),
                run_id,
                datetime.now(UTC),
                HarnessError.error_class,
                f"provenance: {type(exc).__name__}: {exc}",
                wall_s=None,
            )
    started_at = utcnow()
    state = _Rollout(substrate, workload, run_id, options or RolloutOptions(), now, sleep)
    if state.opt.on_start is not None:
        state.opt.on_start(state.t0)
    try:
        state.body()
    except (SubstrateError, WorkloadFailed, HarnessError) as exc:
        state.error_class, state.error_message = exc.error_class, str(exc)
    except Exception as exc:  # unexpected: keep the row, say whose and what
        # Raised inside a substrate call, it is the substrate's (its client raised something
        # its adapter does not classify); anywhere else it is rtax's own bookkeeping.
        state.error_class = "substrate_error" if state.calling else HarnessError.error_class
        where = f" in {state.calling}" if state.calling else ""
        state.error_message = f"{type(exc).__name__}{where}: {exc}"
    except BaseException:
        state.cleanup()
        raise
    state.cleanup()
    if launch is not None:
        provenance = {**provenance, "launch": launch}  # e.g. the snapshot it restored
    return state.record(started_at, provenance)
