"""Workloads: the commands a rollout runs, tier by tier, the same on every substrate.

Why commands are plain shell strings run from the environment's root: every substrate can run a
shell command, so one workload definition measures all of them with the same work
(docs/workloads.md). The environment's root holds the preloaded ``attrs/`` checkout and
``tools/astsearch.py`` (from the fixture's template); T2 clones into ``repo/``.

- **T0** start-up cost only: ``echo ok``.
- **T1** code inspection in the preloaded checkout: an AST search, a grep, reading part of a file.
- **T2** setup = clone the fixture at the buggy commit; then inspect, run the failing test (it must
  fail), ``git apply`` the fix, run it again (it must pass).
- **Trajectories** (T2 with ``steps=S``): the T2 setup, then S actions drawn deterministically from
  a seed over a fixed mix: 40% inspection, 30% command execution, 20% reversible edits, 10% tests.
"""

from __future__ import annotations

import random
import shlex
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Protocol, TypeVar

TIERS = ("T0", "T1", "T2")

_T = TypeVar("_T")

#: The fixed mix of a trajectory, as (category, share); shares add up to 1.
MIX = (("inspect", 0.4), ("exec", 0.3), ("edit", 0.2), ("test", 0.1))

#: Files that inspection and edits touch (all present in attrs 25.x).
_SOURCES = (
    "_make.py",
    "_funcs.py",
    "validators.py",
    "converters.py",
    "filters.py",
    "setters.py",
    "_cmp.py",
    "exceptions.py",
)
_SYMBOLS = (
    "evolve",
    "asdict",
    "Attribute",
    "_MaxLengthValidator",
    "instance_of",
    "fields",
    "Factory",
    "NOTHING",
    "optional",
    "pipe",
)
#: Each pattern occurs in every file of _SOURCES, so a grep that finds nothing is a real failure.
_GREP_PATTERNS = ("def ", "return ", "import ")
#: Fast, single attrs tests that pass at both the pristine and the buggy commit.
FAST_TESTS = (
    "tests/test_validators.py::TestInstanceOf::test_success",
    "tests/test_converters.py::TestOptional::test_success_with_type",
    "tests/test_funcs.py::TestEvolve::test_empty",
    "tests/test_validators.py::TestIn_::test_success_with_value",
    "tests/test_converters.py::TestToBool::test_unhashable",
    "tests/test_funcs.py::TestAssoc::test_empty",
    "tests/test_dunders.py::TestAddHash::test_enforces_type",
)


class WorkloadError(ValueError):
    """A workload was asked for with parameters that make no sense."""


@dataclass(frozen=True)
class Action:
    """One command and what counts as its success.

    `expect_exit` None accepts any exit code; `expect_stdout` is a substring that must appear.
    A mismatch fails the rollout as ``workload_failed``: it proves the command did not really do
    its work, which a latency figure must never hide.
    """

    category: str
    command: str
    expect_exit: int | None = 0
    expect_stdout: str | None = None
    timeout_s: float = 120.0
    #: what a mismatch fails the rollout as (None: ``workload_failed``); a restored
    #: environment's state check fails it as `rtax.core.failures.RestoreCorrupt`
    failure: type[Exception] | None = None

    def check(self, exit_code: int, stdout: str) -> str | None:
        """None if the result is what was expected, else a one-line reason."""
        if self.expect_exit is not None and exit_code != self.expect_exit:
            return f"exit code {exit_code}, expected {self.expect_exit}"
        if self.expect_stdout is not None and self.expect_stdout not in stdout:
            return f"output lacks {self.expect_stdout!r}"
        return None


@dataclass(frozen=True)
class RepoSource:
    """Where T2 clones from and what it fixes; defaults come from the built fixture.

    Configurable so that a user with internet can point T2 at the upstream attrs repository
    (with their own commit, fix patch and failing test).
    """

    url: str
    commit: str
    fix_patch: str
    failing_test: str


@dataclass(frozen=True)
class Workload:
    tier: str
    steps: int  # 0: the tier's fixed script; S > 0: a trajectory of S actions
    seed: int
    setup: tuple[Action, ...] = ()
    actions: tuple[Action, ...] = field(default_factory=tuple)


def _test_cmd(node: str) -> str:
    """Run one attrs test in repo/ against its own sources (not an installed attrs)."""
    return f"cd repo && PYTHONPATH=src python3 -m pytest -q -p no:cacheprovider {shlex.quote(node)}"


def _clone(source: RepoSource) -> Action:
    url, commit = shlex.quote(source.url), shlex.quote(source.commit)
    return Action(
        "setup",
        f"git clone --quiet --no-checkout {url} repo && git -C repo checkout --quiet {commit}",
        timeout_s=300.0,
    )


def _apply(patch: str) -> str:
    marker = "RTAX_PATCH_EOF"
    if marker in patch:
        raise WorkloadError("the fix patch contains the heredoc marker")
    return f"git -C repo apply --whitespace=nowarn - <<'{marker}'\n{patch}{marker}"


def validate(tier: str, steps: int) -> None:
    """Raise `WorkloadError` unless `tier` and `steps` make a workload."""
    if tier not in TIERS:
        raise WorkloadError(f"unknown tier {tier!r} (choose from {', '.join(TIERS)})")
    if steps < 0:
        raise WorkloadError(f"steps must be >= 0, got {steps}")
    if steps and tier != "T2":
        raise WorkloadError("trajectories (--steps) run on the T2 setup: use --tier T2")


def build(
    tier: str, *, steps: int = 0, seed: int = 0, source: RepoSource | None = None
) -> Workload:
    """The workload for `tier` (and `steps` for a trajectory); pure and deterministic."""
    validate(tier, steps)
    if tier == "T0":
        return Workload("T0", 0, seed, actions=(Action("exec", "echo ok", expect_stdout="ok"),))
    if tier == "T1":
        return Workload(
            "T1",
            0,
            seed,
            actions=(
                Action(
                    "inspect",
                    "python3 tools/astsearch.py attrs/src evolve",
                    expect_stdout="def evolve",
                ),
                Action("inspect", "grep -rn 'def asdict' attrs/src", expect_stdout="def asdict"),
                Action("inspect", "sed -n '1,80p' attrs/src/attr/_make.py", expect_stdout="import"),
            ),
        )
    if source is None:
        raise WorkloadError("T2 needs a repository source (build the fixture: rtax fixtures)")
    setup = (_clone(source),)
    if steps:
        return Workload("T2", steps, seed, setup=setup, actions=trajectory(steps, seed))
    return Workload(
        "T2",
        0,
        seed,
        setup=setup,
        actions=(
            Action(
                "inspect",
                "python3 tools/astsearch.py repo/src _MaxLengthValidator",
                expect_stdout="def _MaxLengthValidator",
            ),
            Action(
                "inspect",
                "grep -n 'max_length' repo/src/attr/validators.py",
                expect_stdout="max_length",
            ),
            Action("test", _test_cmd(source.failing_test), expect_exit=1),
            Action("edit", _apply(source.fix_patch)),
            Action("test", _test_cmd(source.failing_test), expect_exit=0, expect_stdout="passed"),
        ),
    )


def warmup(workload: Workload) -> tuple[Action, ...]:
    """What a snapshot's environment runs after the set-up and before it is taken
    (docs/measurement.md#launch-paths): for T2, the test suite collected once, so that the
    sources' byte code is compiled and on disk in the snapshot; nothing for T0 and T1, which
    have no set-up. A warm-up never counts in a rollout: it is part of making the snapshot."""
    if workload.tier != "T2":
        return ()
    return (
        Action(
            "warmup",
            "cd repo && PYTHONPATH=src python3 -m pytest -q -p no:cacheprovider --collect-only",
            expect_exit=0,
            timeout_s=300.0,
        ),
    )


def mix_counts(steps: int) -> dict[str, int]:
    """How many actions of each category a trajectory of `steps` has (largest remainder)."""
    raw = {cat: share * steps for cat, share in MIX}
    counts = {cat: int(v) for cat, v in raw.items()}
    by_remainder = sorted(MIX, key=lambda m: (raw[m[0]] - counts[m[0]], m[1]), reverse=True)
    for cat, _ in by_remainder[: steps - sum(counts.values())]:
        counts[cat] += 1
    return counts


def trajectory(steps: int, seed: int) -> tuple[Action, ...]:
    """S actions over the fixed mix, shuffled by `seed`: same seed, same actions, anywhere.

    Edits are reversible: an edit puts a marker comment at the top of a source file, and the next
    edit reverts it with ``git checkout``, so the tree stays valid for the tests in between.
    """
    rng = random.Random(seed)
    order = [cat for cat, n in mix_counts(steps).items() for _ in range(n)]
    rng.shuffle(order)
    pending_edit: str | None = None
    actions: list[Action] = []
    for i, cat in enumerate(order):
        if cat == "inspect":
            actions.append(_inspect(rng))
        elif cat == "exec":
            actions.append(_exec(rng))
        elif cat == "edit":
            if pending_edit is None:
                pending_edit = _edit_target(rng)
                actions.append(_edit_insert(pending_edit, i))
            else:
                actions.append(_edit_revert(pending_edit))
                pending_edit = None
        else:
            actions.append(_fast_test(rng))
    return tuple(actions)


def templates(source: RepoSource) -> tuple[Action, ...]:
    """One concrete action of every form a workload can produce, in an order one environment can
    run them: T2's clone (category ``setup``), T0's and T1's fixed actions, every inspection and
    execution form of a trajectory, a marker edit and its revert, a fast test, then T2's fixed
    script (failing test, fix, passing test).

    Why: the contract runs each of these once on every substrate, so a form that some runtime
    can't run (gVisor's statx, say) fails in CI rather than in a measurement. The forms come from
    the same tables and helpers `trajectory` draws from, so a new form can't be left out; the
    seeded draws are replaced by `_First` (each range's start, each list's first entry).
    """
    first = _First()
    t2 = build("T2", source=source)
    forms = [
        *(form(first, first.choice(_SOURCES)) for form in _INSPECT_FORMS),
        *(form(first) for form in _EXEC_FORMS),
    ]
    target = _edit_target(first)
    edits = [_edit_insert(target, 0), _edit_revert(target)]
    return (
        *t2.setup,
        *build("T0").actions,
        *build("T1").actions,
        *forms,
        *edits,
        _fast_test(first),
        *t2.actions,
    )


class _Draw(Protocol):
    """What a form draws its parameters from: a seeded `random.Random`, or `_First`."""

    def randrange(self, start: int, stop: int = ..., /) -> int: ...

    def choice(self, seq: Sequence[_T], /) -> _T: ...


class _First:
    """A draw that always takes the first option: `templates`' stand-in for the seeded RNG."""

    def randrange(self, start: int, stop: int | None = None, /) -> int:
        return 0 if stop is None else start

    def choice(self, seq: Sequence[_T], /) -> _T:
        return seq[0]


# -- trajectory forms: each category's forms are a table that both `trajectory` (through the
# seeded draw) and `templates` (every entry) use. The order of the tables and of the draws inside
# each form is part of what a seed means: changing them changes every stored trajectory.


def _inspect_ls(draw: _Draw, src: str) -> Action:
    return Action("inspect", "ls -la repo/src/attr", expect_stdout=src)


def _inspect_sed(draw: _Draw, src: str) -> Action:
    start = draw.randrange(1, 200)
    return Action("inspect", f"sed -n '{start},{start + 40}p' repo/src/attr/{src}")


def _inspect_grep(draw: _Draw, src: str) -> Action:
    pattern = draw.choice(_GREP_PATTERNS)
    return Action("inspect", f"grep -rn {shlex.quote(pattern)} repo/src/attr/{src}")


def _inspect_find(draw: _Draw, src: str) -> Action:
    return Action(
        "inspect",
        f"find repo -name {shlex.quote(src)} -not -path '*/.git/*'",
        expect_stdout=src,
    )


def _inspect_astsearch(draw: _Draw, src: str) -> Action:
    symbol = draw.choice(_SYMBOLS)
    return Action("inspect", f"python3 tools/astsearch.py repo/src {symbol}", expect_stdout=symbol)


_INSPECT_FORMS: tuple[Callable[[_Draw, str], Action], ...] = (
    _inspect_ls,
    _inspect_sed,
    _inspect_grep,
    _inspect_find,
    _inspect_astsearch,
)


def _inspect(draw: _Draw) -> Action:
    form = _INSPECT_FORMS[draw.randrange(len(_INSPECT_FORMS))]
    return form(draw, draw.choice(_SOURCES))  # the file is drawn before the form's own draws


def _exec_ast_count(draw: _Draw) -> Action:
    src = draw.choice(_SOURCES)
    return Action(
        "exec",
        'python3 -c "import ast; '
        f"print(len(ast.parse(open('repo/src/attr/{src}').read()).body))\"",
    )


def _exec_sum(draw: _Draw) -> Action:
    n = draw.randrange(100, 10_000)
    return Action("exec", f"python3 -c 'print(sum(range({n})))'", expect_stdout=str(sum(range(n))))


def _exec_git_status(draw: _Draw) -> Action:
    return Action("exec", "git -C repo status --short")


def _exec_git_log(draw: _Draw) -> Action:
    return Action("exec", "git -C repo log --oneline -n 5")


def _exec_git_diff(draw: _Draw) -> Action:
    return Action("exec", "git -C repo diff --stat")


_EXEC_FORMS: tuple[Callable[[_Draw], Action], ...] = (
    _exec_ast_count,
    _exec_sum,
    _exec_git_status,
    _exec_git_log,
    _exec_git_diff,
)


def _exec(draw: _Draw) -> Action:
    return _EXEC_FORMS[draw.randrange(len(_EXEC_FORMS))](draw)


def _edit_target(draw: _Draw) -> str:
    return f"src/attr/{draw.choice(_SOURCES)}"


def _edit_insert(path: str, index: int) -> Action:
    """A marker comment at the top of `path` (index: the action's position, so each differs)."""
    return Action("edit", f"sed -i '1i # rtax edit {index}' repo/{path}")


def _edit_revert(path: str) -> Action:
    return Action("edit", f"git -C repo checkout --quiet -- {path}")


def _fast_test(draw: _Draw) -> Action:
    return Action("test", _test_cmd(draw.choice(FAST_TESTS)), expect_stdout="1 passed")
