"""The probe runner against a fake substrate on a fake clock: every phase, every action latency,
the episode, time-to-first-command and the overhead are checked against values worked out by hand
(docs/measurement.md).

Why a fake clock: `overhead` is defined as wall time minus the phases, so "phases + overhead =
wall" holds by construction and tests nothing. Here each substrate call advances the clock by a
known amount, and harness work (the workload's own checks) advances it by another known amount,
so each figure has an independent expected value.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import pytest

from rtax.core.failures import CleanupFailed, ExecError, ReadyTimeout
from rtax.core.options import RolloutOptions
from rtax.core.workloads import Action, Workload
from rtax.rollouts.rollout import run_rollout
from rtax.substrates import kit
from rtax.substrates.base import CommandResult, Environment, Leftover


class FakeClock:
    """A clock that moves only when told to."""

    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t

    def advance(self, seconds: float) -> None:
        self.t += seconds


class FakeSubstrate:
    """Each protocol call takes a scripted time on the fake clock; commands take what their
    table says."""

    kind = "fake"
    fidelity = "real"
    mode = "exec"
    host_address = "127.0.0.1"

    def __init__(self, clock: FakeClock, durations: dict[str, float], commands: dict[str, Any]):
        self.name = "fake"
        self.clock = clock
        self.durations = durations
        self.commands = commands  # command -> (seconds, exit code, stdout) or an exception
        self.calls: list[str] = []

    def create(self, run_id: str, *, lifetime_s: float | None = None) -> Environment:
        self.calls.append("create")
        self.clock.advance(self.durations["create"])
        return Environment(env_id="fake-1", run_id=run_id)

    def wait_running(self, env: Environment, timeout_s: float) -> None:
        self.calls.append("wait_running")
        self.clock.advance(self.durations["orchestration"])

    def run(self, env: Environment, command: str, timeout_s: float) -> CommandResult:
        self.calls.append(command)
        outcome = self.commands[command]
        if isinstance(outcome, list):  # a sequence of outcomes, one per call
            outcome = outcome.pop(0)
        if isinstance(outcome, Exception):
            self.clock.advance(0.25)
            raise outcome
        seconds, code, out = outcome
        self.clock.advance(seconds)
        return CommandResult(code, out, "", seconds)

    def destroy(self, env: Environment, timeout_s: float) -> None:
        self.calls.append("destroy")
        self.clock.advance(self.durations["cleanup"])

    def leftovers(self) -> list[Leftover]:
        return []

    def prepare(self, log: Any) -> None:
        pass

    def describe(self) -> dict[str, Any]:
        return {"kind": self.kind, "endpoint": "fake://"}

    def close(self) -> None:
        pass


@dataclass(frozen=True)
class SlowCheckAction(Action):
    """An action whose success check (harness code, between substrate calls) takes time."""

    clock: FakeClock | None = None
    check_s: float = 0.0

    def check(self, exit_code: int, stdout: str) -> str | None:
        assert self.clock is not None
        self.clock.advance(self.check_s)
        return super().check(exit_code, stdout)


DURATIONS = {"create": 1.5, "orchestration": 2.25, "cleanup": 0.75}
PROVENANCE = {"host": "test", "rtax_version": "0", "substrate": {"endpoint": "fake://"}}


def _run(sub: FakeSubstrate, clock: FakeClock, workload: Workload, **options: Any):
    return run_rollout(
        sub,
        workload,
        run_id="r1",
        now=clock,
        provenance=PROVENANCE,
        options=RolloutOptions(**options),
    )


def test_phases_episode_and_overhead_are_the_scripted_durations() -> None:
    clock = FakeClock()
    sub = FakeSubstrate(
        clock,
        DURATIONS,
        {
            "true": (0.125, 0, ""),
            "clone": (3.0, 0, ""),
            "a": (0.5, 0, "ok"),
            "b": (0.0625, 0, "ok"),
        },
    )
    workload = Workload(
        "T2",
        2,
        0,
        setup=(Action("setup", "clone"),),
        actions=(
            SlowCheckAction("exec", "a", expect_stdout="ok", clock=clock, check_s=0.01),
            SlowCheckAction("inspect", "b", expect_stdout="ok", clock=clock, check_s=0.02),
        ),
    )
    record = _run(sub, clock, workload)
    run = record.run
    assert run["status"] == "ok", run["error_message"]
    assert run["create_s"] == 1.5
    assert run["orchestration_s"] == 2.25
    assert run["ready_s"] == 0.125
    assert run["setup_s"] == 3.0
    assert run["actions_s"] == 0.5625  # 0.5 + 0.0625: the checks are not the substrate's time
    assert run["cleanup_s"] == 0.75
    # the harness's own time, and only it: the two slow checks
    assert run["overhead_s"] == pytest.approx(0.03, abs=1e-12)
    assert run["time_to_first_command_s"] == 1.5 + 2.25 + 0.125
    # episode: create request to the end of the last action, the last check included
    assert run["episode_s"] == pytest.approx(1.5 + 2.25 + 0.125 + 3.0 + 0.5625 + 0.03)
    assert run["wall_s"] == pytest.approx(run["episode_s"] + 0.75)
    rows = [(a["phase"], a["idx"], a["latency_s"], a["ok"]) for a in record.actions]
    assert rows == [
        ("ready", 0, 0.125, 1),
        ("setup", 0, 3.0, 1),
        ("action", 0, 0.5, 1),
        ("action", 1, 0.0625, 1),
    ]
    # each action's offset from the create request, as worked out from the script
    offsets = [a["t_offset_s"] for a in record.actions]
    assert offsets == pytest.approx([3.75, 3.875, 6.875, 7.385])
    assert sub.calls == ["create", "wait_running", "true", "clone", "a", "b", "destroy"]


def test_a_failed_action_keeps_its_latency_and_stops_the_episode() -> None:
    clock = FakeClock()
    sub = FakeSubstrate(
        clock,
        DURATIONS,
        {"true": (0.125, 0, ""), "a": (0.5, 0, "ok"), "b": (0.25, 2, "")},
    )
    workload = Workload(
        "T1", 0, 0, actions=(Action("exec", "a"), Action("exec", "b"), Action("exec", "never"))
    )
    record = _run(sub, clock, workload)
    run = record.run
    assert run["status"] == "failed"
    assert run["error_class"] == "workload_failed"
    assert run["actions_s"] == 0.75
    assert run["episode_s"] is None  # no episode without its last action
    assert run["time_to_first_command_s"] == 1.5 + 2.25 + 0.125
    assert run["cleanup_s"] == 0.75 and run["cleanup_ok"] == 1
    assert run["n_actions_done"] == 1
    assert [a["ok"] for a in record.actions] == [1, 1, 0]
    assert "never" not in sub.calls


@pytest.mark.parametrize(
    ("outcome", "error_class"),
    [
        ((0.5, 0, ""), "output_lost"),  # exit 0, nothing at all: the substrate lost it
        ((0.5, 0, "nope"), "workload_failed"),  # it said something else: the workload's
        ((0.5, 1, ""), "workload_failed"),  # it failed: the workload's
    ],
)
def test_output_lost_by_the_substrate_is_not_the_workloads_failure(
    outcome: tuple[float, int, str], error_class: str
) -> None:
    """A command that exits 0 with nothing on either stream, where its action expects
    output, is the substrate losing the output (Docker's exec can: moby/moby#27289), kept
    and classified as ``output_lost``; any other miss stays ``workload_failed``."""
    clock = FakeClock()
    sub = FakeSubstrate(clock, DURATIONS, {"true": (0.125, 0, ""), "echo ok": outcome})
    workload = Workload("T0", 0, 0, actions=(Action("exec", "echo ok", expect_stdout="ok"),))
    record = _run(sub, clock, workload)
    assert record.run["status"] == "failed"
    assert record.run["error_class"] == error_class
    assert record.actions[-1]["ok"] == 0 and record.actions[-1]["error_class"] == error_class
    assert record.actions[-1]["latency_s"] == 0.5  # the raw sample is kept either way


def test_a_refused_first_command_is_ready_time_not_overhead() -> None:
    """Two refused attempts (0.25 s each on the fake clock), then success: the ready phase is
    the whole span; each attempt is its own row."""
    clock = FakeClock()
    refusals = [ExecError("not yet"), ExecError("not yet"), (0.125, 0, "")]
    sub = FakeSubstrate(clock, DURATIONS, {"true": refusals, "a": (0.5, 0, "")})
    workload = Workload("T0", 0, 0, actions=(Action("exec", "a"),))
    record = _run(sub, clock, workload)
    run = record.run
    assert run["status"] == "ok", run["error_message"]
    ready_rows = [a for a in record.actions if a["phase"] == "ready"]
    assert [r["ok"] for r in ready_rows] == [0, 0, 1]
    assert [r["latency_s"] for r in ready_rows] == [0.25, 0.25, 0.125]
    # the back-off pauses between attempts are real sleeps, not on the fake clock, so the
    # fake ready phase is exactly the three attempts
    assert run["ready_s"] == 0.625
    assert run["overhead_s"] == 0.0
    assert run["time_to_first_command_s"] == 1.5 + 2.25 + 0.625


class _SlowDown(Exception):
    """A service's "slow down" answer (HTTP 429)."""


class _RateLimitedCreate(FakeSubstrate):
    """Its create is refused once with "slow down" and retried by the kit's policy, on the
    fake clock, as a cloud substrate's create is."""

    def create(self, run_id: str, *, lifetime_s: float | None = None) -> Environment:
        refusals = [_SlowDown()]
        policy = kit.RetryPolicy(
            base_s=0.5, jitter=lambda w: w, now=self.clock, sleep=self.clock.advance
        )

        def call() -> Environment:
            if refusals:
                raise refusals.pop()
            return FakeSubstrate.create(self, run_id)

        waits: list = []
        limited = lambda exc: isinstance(exc, _SlowDown)  # noqa: E731
        env = policy.call(call, what="create", limited=limited, on_wait=waits.append)
        env.rate_limit_waits.extend(waits)
        return env


def test_a_rate_limit_wait_is_part_of_its_phase_and_named_in_provenance() -> None:
    clock = FakeClock()
    sub = _RateLimitedCreate(clock, DURATIONS, {"true": (0.125, 0, ""), "a": (0.5, 0, "")})
    record = _run(sub, clock, Workload("T0", 0, 0, actions=(Action("exec", "a"),)))
    run = record.run
    assert run["status"] == "ok", run["error_message"]
    assert run["create_s"] == 0.5 + 1.5  # the wait the service asked for, then the create
    assert json.loads(run["provenance"])["rate_limit_waits"] == [
        {"call": "create", "attempt": 1, "wait_s": 0.5, "retry_after_s": None}
    ]
    plain = _run(
        FakeSubstrate(FakeClock(), DURATIONS, {"true": (0.1, 0, "")}), clock, Workload("T0", 0, 0)
    )
    assert "rate_limit_waits" not in json.loads(plain.run["provenance"])


def test_the_deadline_ends_a_rollout_and_cleanup_still_runs() -> None:
    clock = FakeClock()
    sub = FakeSubstrate(
        clock, DURATIONS, {"true": (0.125, 0, ""), "a": (10.0, 0, ""), "b": (1.0, 0, "")}
    )
    workload = Workload("T1", 0, 0, actions=(Action("exec", "a"), Action("exec", "b")))
    record = _run(sub, clock, workload, deadline_s=12.0)
    run = record.run
    assert run["error_class"] == "deadline_exceeded"
    assert "b" not in sub.calls  # 1.5 + 2.25 + 0.125 + 10 = 13.875 s > 12 s
    assert run["cleanup_s"] == 0.75
    assert run["actions_s"] == 10.0


# -- nothing leaks: every failure after create is cleaned up (docs/adding-a-substrate.md) -------


class _Breaks(FakeSubstrate):
    """A fake whose start or removal can be made to fail."""

    broken_wait = False
    broken_destroy = False

    def wait_running(self, env: Environment, timeout_s: float) -> None:
        super().wait_running(env, timeout_s)
        if self.broken_wait:
            raise ReadyTimeout("never running")

    def destroy(self, env: Environment, timeout_s: float) -> None:
        super().destroy(env, timeout_s)
        if self.broken_destroy:
            raise CleanupFailed("still there")


def _refused(message: str) -> ExecError:
    error = ExecError(message)
    error.permanent = True  # ends the ready phase at once
    return error


@pytest.mark.parametrize(
    ("where", "error_class"),
    [
        ("wait_running", "ready_timeout"),
        ("ready", "exec_error"),
        ("setup", "exec_error"),
        ("action", "action_timeout"),
        ("unclassified", "substrate_error"),
        ("cancel", "cancelled"),
    ],
)
def test_every_failure_after_create_destroys_the_environment(where: str, error_class: str) -> None:
    import threading

    from rtax.core.failures import CommandTimeout

    clock = FakeClock()
    commands: dict[str, Any] = {"true": (0.1, 0, ""), "s": (0.1, 0, ""), "a": (0.1, 0, "")}
    if where == "ready":
        commands["true"] = _refused("exec refused")
    elif where == "setup":
        commands["s"] = ExecError("setup refused")
    elif where == "action":
        commands["a"] = CommandTimeout("killed")
    elif where == "unclassified":
        commands["a"] = RuntimeError("the client raised something odd")
    sub = _Breaks(clock, DURATIONS, commands)
    sub.broken_wait = where == "wait_running"
    cancel = threading.Event()
    if where == "cancel":
        cancel.set()
    workload = Workload("T1", 0, 0, setup=(Action("setup", "s"),), actions=(Action("exec", "a"),))
    record = _run(sub, clock, workload, cancel=cancel)
    assert record.run["error_class"] == error_class
    assert sub.calls.count("destroy") == 1 and record.run["cleanup_ok"] == 1


def test_a_destroy_that_fails_is_kept_as_cleanup_failed() -> None:
    """The row says so; the environment, still labelled, is left to the reaper."""
    clock = FakeClock()
    sub = _Breaks(clock, DURATIONS, {"true": (0.1, 0, ""), "a": (0.1, 0, "")})
    sub.broken_destroy = True
    record = _run(sub, clock, Workload("T1", 0, 0, actions=(Action("exec", "a"),)))
    assert (record.run["error_class"], record.run["cleanup_ok"]) == ("cleanup_failed", 0)
    assert "still there" in record.run["error_message"]
    sub.commands["a"] = ExecError("boom")  # an earlier failure keeps its own class
    again = _run(sub, clock, Workload("T1", 0, 0, actions=(Action("exec", "a"),)))
    assert (again.run["error_class"], again.run["cleanup_ok"]) == ("exec_error", 0)


# -- warm starts: the claim phase (docs/measurement.md#warm-pools) ---------------------------


class _Pooled(FakeSubstrate):
    """A fake warm pool: `claim` takes `claim_s` on the fake clock and hands over an
    environment made before the rollout (its making is in `pool`, not in the run's phases)."""

    claim_s = 0.0625
    refuse: Exception | None = None
    launch_type = "warm"

    def setup_of(self, env: Environment, setup: tuple[Action, ...]) -> tuple[Action, ...]:
        return setup

    def claim(self, run_id: str, *, lifetime_s: float, timeout_s: float) -> Environment:
        self.calls.append("claim")
        self.asked = (lifetime_s, timeout_s)
        self.clock.advance(self.claim_s)
        if self.refuse is not None:
            raise self.refuse
        env = Environment(env_id="pooled-1", run_id=run_id)
        env.pool = {"create_s": 1.5, "time_to_first_command_s": 3.875, "waited_s": 0.0}
        return env


def test_a_warm_start_claims_instead_of_creating_then_runs_its_first_command() -> None:
    """The claim replaces create and orchestration; its first `true` is the ready phase, as a
    cold start's (docs/measurement.md#launch-paths): time to first command is claim + ready."""
    clock = FakeClock()
    sub = _Pooled(
        clock, DURATIONS, {"true": (0.125, 0, ""), "a": (0.5, 0, "ok"), "b": (0.25, 0, "ok")}
    )
    workload = Workload("T1", 0, 0, actions=(Action("exec", "a"), Action("exec", "b")))
    record = _run(sub, clock, workload, deadline_s=600, cleanup_timeout_s=60)
    run = record.run
    assert run["status"] == "ok", run["error_message"]
    assert run["launch_type"] == "warm"
    assert sub.calls == ["claim", "true", "a", "b", "destroy"]  # nothing made
    assert sub.asked == (660, 300 + 120)  # its lifetime; as long as a cold start may wait
    assert (run["create_s"], run["orchestration_s"], run["ready_s"]) == (None, None, 0.125)
    assert run["claim_s"] == 0.0625
    assert run["time_to_first_command_s"] == 0.0625 + 0.125
    assert run["episode_s"] == pytest.approx(0.0625 + 0.125 + 0.75)
    assert run["wall_s"] == pytest.approx(0.0625 + 0.125 + 0.75 + 0.75)  # + cleanup
    assert run["overhead_s"] == pytest.approx(0.0, abs=1e-12)
    assert [a["phase"] for a in record.actions] == ["ready", "action", "action"]
    assert [a["t_offset_s"] for a in record.actions] == pytest.approx([0.0625, 0.1875, 0.6875])
    assert json.loads(run["provenance"])["pool"]["time_to_first_command_s"] == 3.875


def test_a_claim_that_times_out_is_a_failed_warm_run_with_its_wait_kept() -> None:
    from rtax.core.failures import ClaimTimeout

    clock = FakeClock()
    sub = _Pooled(clock, DURATIONS, {"a": (0.5, 0, "ok")})
    sub.claim_s, sub.refuse = 420.0, ClaimTimeout("no environment within 420 s")
    record = _run(sub, clock, Workload("T1", 0, 0, actions=(Action("exec", "a"),)))
    run = record.run
    assert (run["status"], run["error_class"], run["launch_type"]) == (
        "failed",
        "claim_timeout",
        "warm",
    )
    assert run["claim_s"] == 420.0 and run["wall_s"] == 420.0  # the wait is the phase
    assert run["time_to_first_command_s"] is None  # nothing was handed over
    assert sub.calls == ["claim"] and run["cleanup_ok"] is None  # nothing to clean up
