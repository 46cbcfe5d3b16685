"""The CI guard on contract coverage (RTAX_REQUIRE_CONTRACT): a kind that didn't run, a skip, a
failure or a deselected contract test each make it fail; full coverage passes."""

from __future__ import annotations

from contract import coverage_problems

REQUIRED = ["local", "ec2"]


def test_full_coverage_passes() -> None:
    outcomes = {"local": ["passed"] * 3, "ec2": ["passed"] * 3}
    assert coverage_problems(REQUIRED, outcomes, []) == []
    assert coverage_problems([], {}, ["t::x"]) == []  # not required: nothing to check


def test_each_shortfall_is_one_line() -> None:
    outcomes = {"local": ["passed", "skipped"], "daytona": ["passed"]}
    assert coverage_problems(REQUIRED, outcomes, []) == [
        "local: contract tests skipped",
        "ec2: its contract suite did not run",
    ]
    failed = {"local": ["passed"], "ec2": ["failed", "passed"]}
    assert coverage_problems(REQUIRED, failed, []) == ["ec2: contract tests failed"]
    full = {"local": ["passed"], "ec2": ["passed"]}
    assert coverage_problems(REQUIRED, full, ["a::t1", "a::t2"]) == [
        "2 contract tests deselected, e.g. a::t1"
    ]
