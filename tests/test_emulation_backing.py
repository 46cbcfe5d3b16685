"""An emulated delete removes its backing container even when the engine is away for a while.

The fault suite restarts the Docker engine under running rollouts; an EC2 instance terminated at
that moment was left as an exited container while the API no longer listed it (an environment
the real service would have deleted): one failed removal was given up for good.
"""

from __future__ import annotations

import threading

import pytest

from polling import joined
from rtax.core.failures import CleanupFailed
from rtax.emulation import backing
from rtax.emulation.faults import Faults
from rtax.substrates.base import Environment


class _Flaky:
    """A backing substrate whose engine refuses the first `failures` removals."""

    def __init__(self, failures: int) -> None:
        self.failures = failures
        self.attempts = 0
        self.gone: list[str] = []

    def destroy(self, env: Environment, timeout_s: float) -> None:
        self.attempts += 1
        if self.attempts <= self.failures:
            raise CleanupFailed("engine restarting (test)")
        self.gone.append(env.env_id)


def test_a_removal_is_retried_at_a_fixed_interval_until_the_engine_answers() -> None:
    flaky, waits = _Flaky(3), []
    removed = backing.remove(
        flaky, Environment("c1", "r1"), interval_s=0.25, wait=lambda s: bool(waits.append(s))
    )
    assert removed and flaky.gone == ["c1"]
    assert flaky.attempts == 4 and waits == [0.25, 0.25, 0.25]


def test_a_removal_gives_up_at_its_deadline_and_on_stop() -> None:
    flaky = _Flaky(10**6)
    assert not backing.remove(flaky, Environment("c1", "r1"), deadline_s=0.2, interval_s=0.05)
    assert flaky.gone == [] and flaky.attempts >= 2
    stop = threading.Event()
    stop.set()
    again = _Flaky(10**6)
    assert not backing.remove(again, Environment("c2", "r2"), stop=stop)
    assert again.attempts == 1  # stopping: the emulation's stop removes what is left


@pytest.mark.usefixtures("docker_api")
def test_ec2_terminate_removes_the_container_after_a_failed_first_attempt(
    runner_image: str,
) -> None:
    from rtax.emulation.ec2.instances import Fleet, Instance

    fleet = Fleet(runner_image, Faults({"run": "launch"}, {"agent": "the agent"}))
    flaky = _Flaky(1)
    fleet.backing = flaky  # type: ignore[assignment]
    env = Environment("c-test", "i-test")
    fleet._instances["i-test"] = Instance("i-test", env=env, online=True)
    fleet.terminate("i-test")
    for thread in list(fleet._threads):
        joined(thread, "the terminated instance's container removal")
    assert flaky.gone == ["c-test"]  # the old fleet gave up after the refused first attempt
    assert flaky.attempts == 2
