"""Whose failure is it (docs/measurement.md#failures)? An unclassified exception from inside a
substrate call is the substrate's (`substrate_error`, counted); one from rtax's own bookkeeping is a
`harness_error` (kept, never counted against the substrate)."""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

from rtax.core import workloads
from rtax.rollouts.rollout import run_rollout
from rtax.substrates.base import CommandResult, Environment
from rtax.substrates.local import LocalSubstrate


class _ClientBlowsUp(LocalSubstrate):
    """A substrate whose client raises something its adapter does not classify."""

    def run(self, env: Environment, command: str, timeout_s: float) -> CommandResult:
        raise KeyError("status")


@dataclass(frozen=True)
class _BrokenCheck(workloads.Action):
    """rtax's own judgement of a result fails (a bug in the harness, not in the substrate)."""

    def check(self, exit_code: int, stdout: str) -> str | None:
        raise ZeroDivisionError("division by zero")


def test_an_exception_inside_a_substrate_call_is_the_substrates(tmp_path: Path) -> None:
    sub = _ClientBlowsUp(root=tmp_path / "envs", template=tmp_path / "none")
    record = run_rollout(sub, workloads.build("T0"))
    assert (record.run["status"], record.run["error_class"]) == ("failed", "substrate_error")
    assert record.run["error_message"] == "KeyError in run: 'status'"
    assert record.run["cleanup_ok"] == 1 and not list((tmp_path / "envs").iterdir())


def test_an_exception_in_rtax_own_bookkeeping_is_a_harness_error(tmp_path: Path) -> None:
    sub = LocalSubstrate(root=tmp_path / "envs", template=tmp_path / "none")
    workload = workloads.build("T0")
    workload = replace(workload, actions=(_BrokenCheck("exec", "echo hi"),))
    record = run_rollout(sub, workload)
    assert (record.run["error_class"], record.run["fidelity"]) == ("harness_error", "real")
    assert record.run["error_message"].startswith("ZeroDivisionError: ")
    assert record.run["cleanup_ok"] == 1
