"""The shared validators (rtax.core.checks): what each accepts and refuses, the messages the
configuration prints, and that no other module writes its own guard against ``bool`` again."""

from __future__ import annotations

import ast
import math
from collections.abc import Callable
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from rtax.core import checks

ROOT = Path(__file__).resolve().parent.parent
NOT_NUMBERS = [True, False, None, "1", [1], {"a": 1}, 1j]


@pytest.mark.parametrize("value", [0, 1, -3, 2**63])
def test_is_whole_takes_ints(value: int) -> None:
    assert checks.is_whole(value)


@pytest.mark.parametrize("value", [*NOT_NUMBERS, 1.0, 2.5, math.nan, math.inf])
def test_is_whole_refuses_bools_floats_and_strings(value: object) -> None:
    assert not checks.is_whole(value)


def test_is_whole_bounds_are_inclusive() -> None:
    assert checks.is_whole(1, low=1) and not checks.is_whole(0, low=1)
    assert checks.is_whole(10, 1, 10) and not checks.is_whole(11, 1, 10)
    assert checks.is_whole(-5, high=0) and not checks.is_whole(1, high=0)


@pytest.mark.parametrize("value", [0, 1, -1, 0.5, -2.5, 1e308])
def test_is_number_takes_finite_reals(value: float) -> None:
    assert checks.is_number(value)


@pytest.mark.parametrize("value", [*NOT_NUMBERS, math.nan, math.inf, -math.inf])
def test_is_number_refuses_bools_and_non_finite(value: object) -> None:
    assert not checks.is_number(value)


def test_is_positive_is_strictly_above_zero() -> None:
    assert checks.is_positive(1e-300) and checks.is_positive(3)
    assert not checks.is_positive(0) and not checks.is_positive(-0.0)
    assert not checks.is_positive(-1) and not checks.is_positive(math.inf)
    assert not checks.is_positive(True)


def test_is_bool_is_only_true_or_false() -> None:
    assert checks.is_bool(True) and checks.is_bool(False)
    assert not checks.is_bool(1) and not checks.is_bool(0) and not checks.is_bool("true")


def test_is_port() -> None:
    assert checks.is_port(1) and checks.is_port(65535)
    assert not checks.is_port(0) and checks.is_port(0, low=0)
    assert not checks.is_port(65536) and not checks.is_port(-1, low=0)
    assert not checks.is_port(True) and not checks.is_port(8501.0) and not checks.is_port("80")


def test_is_text_is_a_non_empty_string() -> None:
    assert checks.is_text("x") and checks.is_text(" ")
    assert not checks.is_text("") and not checks.is_text(None) and not checks.is_text(1)


@pytest.mark.parametrize("name", ["AWS_PROFILE", "X", "_", "RTAX_2"])
def test_is_env_name_takes_upper_case_names(name: str) -> None:
    assert checks.is_env_name(name)


@pytest.mark.parametrize("name", ["aws_profile", "1X", "X-Y", "X Y", "", "X\n", None, 1])
def test_is_env_name_refuses_the_rest(name: object) -> None:
    assert not checks.is_env_name(name)


def test_names_is_a_list_of_strings_and_a_string_is_a_list_of_one() -> None:
    assert checks.names("local") == ["local"]
    assert checks.names(["a", "b"]) == ["a", "b"]
    assert checks.names([]) == []
    assert checks.names(["a", 1]) is None
    assert checks.names(("a",)) is None
    assert checks.names(None) is None


@pytest.mark.parametrize(
    ("value", "seconds"),
    [
        (5, 5.0),
        (2.5, 2.5),
        (-3, -3.0),
        ("90s", 90.0),
        ("10m", 600.0),
        ("3min", 180.0),
        ("1.5h", 5400.0),
        ("2d", 172800.0),
        ("250ms", 0.25),
        (" 5 s ", 5.0),
        ("7", 7.0),
    ],
)
def test_duration(value: object, seconds: float) -> None:
    assert checks.duration(value) == seconds


@pytest.mark.parametrize(
    ("value", "message"),
    [
        (True, "not a duration"),
        ("soon", "not a duration: 'soon' (use e.g. 30s, 10m, 2h, 1d)"),
        ("-5s", "not a duration: '-5s' (use e.g. 30s, 10m, 2h, 1d)"),
        ("5 weeks", "not a duration: '5 weeks' (use e.g. 30s, 10m, 2h, 1d)"),
        (math.inf, "not a finite duration: inf"),
        (math.nan, "not a finite duration: nan"),
    ],
)
def test_duration_says_what_is_wrong(value: object, message: str) -> None:
    assert _refusal(checks.duration, value) == message


def _refusal(check: Callable[..., float], *args: object, **kwargs: object) -> str:
    with pytest.raises(ValueError) as caught:
        check(*args, **kwargs)
    return str(caught.value)


def test_positive_duration() -> None:
    assert checks.positive_duration("1ms") == 0.001
    for value in (0, "0s", -1):
        assert _refusal(checks.positive_duration, value) == "must be positive"
    assert checks.positive_duration(0, zero=True) == 0.0
    assert _refusal(checks.positive_duration, -1, zero=True) == "must be positive"
    assert _refusal(checks.positive_duration, "x").startswith("not a duration: 'x'")


def test_duration_at_least() -> None:
    assert checks.duration_at_least("1s", 1) == 1.0
    assert _refusal(checks.duration_at_least, "999ms", 1) == "must be at least 1 s"
    assert _refusal(checks.duration_at_least, 0.25, 0.5) == "must be at least 0.5 s"


@given(st.integers(min_value=0, max_value=10**9), st.sampled_from(list(checks._UNITS)))
def test_a_whole_count_of_a_unit_is_that_many_seconds(n: int, unit: str | None) -> None:
    assert checks.duration(f"{n}{unit or ''}") == n * checks._UNITS[unit]


@given(st.booleans())
def test_no_predicate_takes_a_bool_for_a_number(value: bool) -> None:
    assert not any(
        check(value)
        for check in (checks.is_whole, checks.is_number, checks.is_positive, checks.is_port)
    )


#: Where a ``bool`` test outside rtax.core.checks is not a validator: it turns a value into
#: something to show or write (module path, function), and says why it stays.
NOT_VALIDATORS = {
    # TOML's spelling of a boolean when the fault suite writes a configuration
    ("rtax/faultsuite/scenario.py", "_toml"),
    # "yes"/"no" in a dashboard table
    ("rtax/dashboard/format.py", "text"),
}


def _bool_guards(path: Path) -> list[tuple[str, int]]:
    """(enclosing function, line) of every ``isinstance(x, bool)`` (or a tuple with bool)."""
    found: list[tuple[str, int]] = []

    def visit(node: ast.AST, function: str) -> None:
        for child in ast.iter_child_nodes(node):
            name = function
            if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef):
                name = child.name
            if (
                isinstance(child, ast.Call)
                and isinstance(child.func, ast.Name)
                and child.func.id == "isinstance"
                and len(child.args) == 2
                and "bool" in {n.id for n in ast.walk(child.args[1]) if isinstance(n, ast.Name)}
            ):
                found.append((function, child.lineno))
            visit(child, name)

    visit(ast.parse(path.read_text()), "<module>")
    return found


def test_bool_guards_live_in_the_shared_validators_only() -> None:
    """A validator written out again (with its own ``isinstance(x, bool)``) is how the same
    check drifts apart between tables: use rtax.core.checks instead."""
    stray = []
    for path in sorted((ROOT / "rtax").rglob("*.py")):
        rel = str(path.relative_to(ROOT))
        if rel == "rtax/core/checks.py":
            continue
        for function, line in _bool_guards(path):
            if (rel, function) not in NOT_VALIDATORS:
                stray.append(f"{rel}:{line} ({function})")
    assert stray == []
