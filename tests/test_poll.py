"""rtax.substrates.poll on a fake clock: fixed intervals, exact resolutions, deadlines kept."""

from __future__ import annotations

import pytest

from rtax.substrates.poll import poll


class FakeClock:
    """A clock that moves only when slept on, or when a check takes time."""

    def __init__(self, t: float = 100.0) -> None:
        self.t = t
        self.sleeps: list[float] = []

    def now(self) -> float:
        return self.t

    def sleep(self, seconds: float) -> None:
        assert seconds > 0, "a sleep of zero or less is a wasted call"
        self.sleeps.append(seconds)
        self.t += seconds


class Gone(Exception):
    pass


def _event_at(clock: FakeClock, t_event: float, check_cost: float = 0.0):
    """A check that answers once the fake time has reached `t_event`; each check costs
    `check_cost` seconds (its round trip), seen before the answer."""
    seen: list[float] = []

    def check() -> str | None:
        seen.append(clock.t)
        clock.t += check_cost
        return "yes" if clock.t - check_cost >= t_event else None

    return check, seen


def test_first_check_success_has_no_resolution() -> None:
    clock = FakeClock()
    check, seen = _event_at(clock, 0.0)
    got = poll(
        check, interval_s=0.05, deadline=clock.t + 1, timeout=Gone, now=clock.now, sleep=clock.sleep
    )
    assert (got.value, got.resolution_s, got.attempts) == ("yes", 0.0, 1)
    assert seen == [100.0]
    assert clock.sleeps == []


def test_fixed_interval_and_resolution_is_the_gap_before_the_detecting_check() -> None:
    clock = FakeClock(100.0)
    # Event at 100.31; checks cost 4 ms each; the pause is a fixed 50 ms, never growing.
    check, seen = _event_at(clock, 100.31, check_cost=0.004)
    got = poll(
        check, interval_s=0.05, deadline=110.0, timeout=Gone, now=clock.now, sleep=clock.sleep
    )
    # Checks start at 100, then every 54 ms (4 ms round trip + 50 ms pause): the first at or
    # after 100.31 is 100 + 6 * 0.054 = 100.324, the 7th.
    assert got.attempts == 7
    assert seen[-1] == pytest.approx(100.324)
    assert clock.sleeps == pytest.approx([0.05] * 6)
    assert got.resolution_s == pytest.approx(0.05)
    # The detection is late by less than one resolution (plus nothing else).
    assert 0 <= seen[-1] - 100.31 <= got.resolution_s


def test_pause_first_counts_the_first_pause_as_resolution() -> None:
    clock = FakeClock(0.0)
    check, seen = _event_at(clock, 0.0)
    got = poll(
        check,
        interval_s=0.02,
        deadline=5.0,
        timeout=Gone,
        pause_first=True,
        now=clock.now,
        sleep=clock.sleep,
    )
    assert got.attempts == 1
    assert seen == [pytest.approx(0.02)]
    assert got.resolution_s == pytest.approx(0.02)


def test_timeout_at_the_deadline_without_sleeping_past_it() -> None:
    clock = FakeClock(0.0)
    check, seen = _event_at(clock, 99.0, check_cost=0.01)
    with pytest.raises(Gone):
        poll(check, interval_s=0.3, deadline=1.0, timeout=Gone, now=clock.now, sleep=clock.sleep)
    # Checks at 0, 0.31, 0.62, 0.93 (each followed by 10 ms); the pause after the one ending
    # at 0.94 is cut to 0.06 so that the last check is made at the deadline, 1.0.
    assert seen == pytest.approx([0.0, 0.31, 0.62, 0.93, 1.0])
    assert clock.sleeps == pytest.approx([0.3, 0.3, 0.3, 0.06])
    assert clock.t == pytest.approx(1.01)  # the last check's own round trip, nothing more


def test_a_detection_after_a_shortened_pause_reports_the_shortened_gap() -> None:
    clock = FakeClock(0.0)
    check, _ = _event_at(clock, 0.95)
    got = poll(check, interval_s=0.3, deadline=1.0, timeout=Gone, now=clock.now, sleep=clock.sleep)
    # checks at 0, 0.3, 0.6, 0.9 (negative), then the pause is cut to 0.1: seen at 1.0
    assert got.attempts == 5
    assert got.resolution_s == pytest.approx(0.1)


def test_check_errors_propagate_and_bad_interval_is_refused() -> None:
    def boom() -> None:
        raise KeyError("gone")

    with pytest.raises(KeyError):
        poll(boom, interval_s=0.1, deadline=1e9, timeout=Gone)
    with pytest.raises(ValueError):
        poll(lambda: 1, interval_s=0, deadline=1e9, timeout=Gone)


def test_real_clock_smoke() -> None:
    """On the real clock: an event 30 ms ahead is seen within one interval of it."""
    import time

    t_event = time.perf_counter() + 0.03
    got = poll(
        lambda: time.perf_counter() if time.perf_counter() >= t_event else None,
        interval_s=0.005,
        deadline=time.perf_counter() + 5,
        timeout=Gone,
    )
    assert got.value - t_event <= got.resolution_s + 0.005  # + the check's own cost
    assert 0 < got.resolution_s < 0.5  # generous: a loaded machine oversleeps


def test_the_runner_records_reported_and_ready_resolutions() -> None:
    """A fake substrate on a fake clock: two refused ready attempts, then success; the
    substrate reports orchestration and cleanup resolutions and one polled action."""
    from rtax.core.failures import ExecError
    from rtax.core.options import RolloutOptions
    from rtax.core.workloads import Action, Workload
    from rtax.rollouts.rollout import run_rollout
    from rtax.substrates.base import CommandResult, Environment

    clock = FakeClock(0.0)

    class Fake:
        name = kind = "fake"
        fidelity = "modelled"
        mode = "exec"
        refusals = 2

        def create(self, run_id: str, *, lifetime_s: float | None = None) -> Environment:
            return Environment("e", run_id)

        def wait_running(self, env: Environment, timeout_s: float) -> None:
            env.resolved("orchestration", 0.25)

        def run(self, env: Environment, command: str, timeout_s: float) -> CommandResult:
            clock.t += 0.003
            if command == "true" and self.refusals:
                self.refusals -= 1
                raise ExecError("not yet")
            polled = 0.04 if command != "true" else None
            return CommandResult(0, "", "", 0.003, resolution_s=polled)

        def destroy(self, env: Environment, timeout_s: float) -> None:
            env.resolved("cleanup", 0.01)
            env.resolved("cleanup", 0.02)  # two polled events in one phase add up

        def describe(self) -> dict:
            return {}

    work = Workload("T0", 0, 0, actions=(Action("exec", "a"), Action("exec", "b")))
    record = run_rollout(
        Fake(),  # type: ignore[arg-type]
        work,
        options=RolloutOptions(ready_interval_s=0.02),
        now=clock.now,
        sleep=clock.sleep,
        provenance={"host": "h", "rtax_version": "0"},
    )
    run = record.run
    assert run["status"] == "ok", run["error_message"]
    assert clock.sleeps == pytest.approx([0.02, 0.02])  # fixed pauses between ready attempts
    assert run["ready_res_s"] == pytest.approx(0.02)
    assert run["orchestration_res_s"] == 0.25
    assert run["cleanup_res_s"] == pytest.approx(0.03)
    assert run["actions_res_s"] == pytest.approx(0.08)
    assert run["create_res_s"] is None and run["setup_res_s"] is None
    assert [a.get("resolution_s") for a in record.actions] == [None, None, None, 0.04, 0.04]
