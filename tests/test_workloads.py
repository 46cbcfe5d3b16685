"""Workloads are pure and deterministic: the same seed gives the same actions everywhere."""

from __future__ import annotations

import hashlib
import re
import shlex

import pytest
from hypothesis import given
from hypothesis import strategies as st

from rtax.core import workloads
from rtax.core.workloads import WorkloadError

SOURCE = workloads.RepoSource("git://127.0.0.1:1/attrs.git", "abc123", "PATCH\n", "tests/t.py")


@pytest.mark.parametrize(
    ("steps", "expected"),
    [
        (10, {"inspect": 4, "exec": 3, "edit": 2, "test": 1}),
        (50, {"inspect": 20, "exec": 15, "edit": 10, "test": 5}),
        (150, {"inspect": 60, "exec": 45, "edit": 30, "test": 15}),
    ],
)
def test_standard_mixes(steps: int, expected: dict[str, int]) -> None:
    assert workloads.mix_counts(steps) == expected
    actions = workloads.trajectory(steps, seed=0)
    counted = {cat: sum(a.category == cat for a in actions) for cat in expected}
    assert counted == expected


@given(st.integers(min_value=1, max_value=500))
def test_mix_counts_add_up_and_stay_close(steps: int) -> None:
    counts = workloads.mix_counts(steps)
    assert sum(counts.values()) == steps
    for category, share in workloads.MIX:
        assert abs(counts[category] - share * steps) < 1


@given(st.integers(min_value=1, max_value=200), st.integers(min_value=0, max_value=2**32))
def test_same_seed_same_actions(steps: int, seed: int) -> None:
    assert workloads.trajectory(steps, seed) == workloads.trajectory(steps, seed)


def test_different_seeds_differ() -> None:
    assert workloads.trajectory(50, 1) != workloads.trajectory(50, 2)


def test_edits_alternate_apply_and_revert() -> None:
    edits = [a.command for a in workloads.trajectory(150, seed=9) if a.category == "edit"]
    for i, command in enumerate(edits):
        assert command.startswith("sed -i" if i % 2 == 0 else "git -C repo checkout")


def test_tiers() -> None:
    assert [a.command for a in workloads.build("T0").actions] == ["echo ok"]
    assert len(workloads.build("T1").actions) == 3
    t2 = workloads.build("T2", source=SOURCE)
    assert "git clone" in t2.setup[0].command and "abc123" in t2.setup[0].command
    assert [a.expect_exit for a in t2.actions if a.category == "test"] == [1, 0]
    assert "PATCH" in next(a.command for a in t2.actions if a.category == "edit")
    traj = workloads.build("T2", steps=10, seed=4, source=SOURCE)
    assert traj.setup == t2.setup and len(traj.actions) == 10


@pytest.mark.parametrize(
    ("tier", "steps", "message"),
    [
        ("T9", 0, "unknown tier"),
        ("T0", 10, "use --tier T2"),
        ("T1", 5, "use --tier T2"),
        ("T2", -1, ">= 0"),
    ],
)
def test_bad_workloads(tier: str, steps: int, message: str) -> None:
    with pytest.raises(WorkloadError, match=message):
        workloads.build(tier, steps=steps, source=SOURCE)


def test_t2_needs_a_source() -> None:
    with pytest.raises(WorkloadError, match="repository source"):
        workloads.build("T2")


def test_action_check() -> None:
    action = workloads.Action("exec", "x", expect_exit=1, expect_stdout="failed")
    assert action.check(1, "1 failed") is None
    assert "exit code 0" in action.check(0, "1 failed")
    assert "lacks" in action.check(1, "ok")
    assert workloads.Action("exec", "x", expect_exit=None).check(42, "") is None


def _digest(actions: tuple[workloads.Action, ...]) -> str:
    fields = (
        repr((a.category, a.command, a.expect_exit, a.expect_stdout, a.timeout_s)) for a in actions
    )
    return hashlib.sha256("\n".join(fields).encode()).hexdigest()


@pytest.mark.parametrize(
    ("steps", "seed", "digest"),
    [  # computed before the forms became tables: a seed must keep meaning the same actions
        (150, 0, "baf9675c4bc36003bdbba055c5dd9db5e54a8f5c63c555f90da5d3aefebca58e"),
        (50, 7, "c139c14f8bee43bc1bb0e10a00e6147fcf310430dc4e80716a1f5a146e448bf6"),
        (1000, 3, "8782f0f472847231fb0dc60c4c3ec9149030904c5f0a0bf2ab7680a8c57aba23"),
    ],
)
def test_trajectories_are_pinned(steps: int, seed: int, digest: str) -> None:
    assert _digest(workloads.trajectory(steps, seed)) == digest


def _shape(action: workloads.Action) -> tuple[str, str]:
    """An action's form: its command with every drawn parameter replaced by a placeholder."""
    command = action.command
    for value in sorted(
        (*workloads._SOURCES, *workloads._SYMBOLS, *workloads.FAST_TESTS), key=len, reverse=True
    ):
        command = command.replace(value, "<v>")
    for pattern in workloads._GREP_PATTERNS:
        command = command.replace(shlex.quote(pattern), "<v>")
    return action.category, re.sub(r"\d+", "<n>", command)


def test_templates_are_exactly_the_forms_trajectories_draw() -> None:
    """Every form that many long trajectories produce has its template, and no template is a
    form they never produce (the fixed tiers' actions aside)."""
    drawn = {_shape(a) for seed in range(5) for a in workloads.trajectory(2000, seed)}
    fixed = (
        *workloads.build("T0").actions,
        *workloads.build("T1").actions,
        *workloads.build("T2", source=SOURCE).actions,
    )
    templates = workloads.templates(SOURCE)
    forms = [a for a in templates if a not in fixed and a.category != "setup"]
    assert {_shape(a) for a in forms} == drawn
    assert len(forms) == len(drawn) == 5 + 5 + 2 + 1  # inspect, exec, edit + revert, test


def test_templates_run_in_one_environment_in_order() -> None:
    templates = workloads.templates(SOURCE)
    assert templates[0] == workloads.build("T2", source=SOURCE).setup[0]  # the clone first
    assert [a.category for a in templates].count("setup") == 1
    assert templates[-5:] == workloads.build("T2", source=SOURCE).actions  # its own order
    commands = [a.command for a in templates]
    insert = next(i for i, c in enumerate(commands) if c.startswith("sed -i"))
    assert commands[insert + 1] == "git -C repo checkout --quiet -- src/attr/_make.py"
    assert "repo/src/attr/_make.py" in commands[insert]
