"""Workloads are pure and deterministic: the same seed gives the same actions everywhere."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from rtax import workloads
from rtax.workloads import WorkloadError

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
