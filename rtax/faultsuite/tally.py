"""The fault suite's figures: what happened, counted, as one table and one verdict (pure).

Why apart (docs/faults.md): the counting is what makes the suite a proof, so it is plain data in,
plain text out, and tested with hand-made outcomes (tests/test_faultsuite.py): a suite that
reported zero leaks when there is one must fail a test, not only a run.

The counts and where they come from:

- **rollouts**: run ids the scheduler logged as finished (``rollout finished: ... [run ID]``,
  logged before the record is stored, so one lost on the way still counts);
- **rows lost**: finished rollouts with no row in the database (after the last scheduler start
  wrote its spool); **partial**: rows whose stored actions are fewer than the actions the run
  says it completed;
- **leaked**: environments left on each substrate after the final reaper pass, as the engine
  shows them (every container on the private engine backs one) and as each substrate's API
  lists them (`leftovers`), the larger of the two per substrate, plus local working dirs; a
  substrate whose API could not be listed is not checked, and that fails the run too;
- **database is locked**: that message surfaced to a dashboard reader or in any log;
- **secrets**: occurrences of a planted credential in any file the suite collected;
- **scheduler alive**: the scheduler was running, and recording, when the faults were over.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field

#: Every fault kind the suite injects; each must have happened at least once.
FAULT_KINDS = (
    "hung action",
    "container killed mid-trajectory",
    "dockerd restarted",
    "create failure",
    "429 storm",
    "500 storm",
    "lost create response",
    "scheduler SIGKILL",
    "disk full",
    "half-made local environment",
    "dashboard reads",
)

_FINISHED = re.compile(r"rollout finished: (\S+) .*\[run ([0-9a-f]+)\]")
LOCKED = "database is locked"


def finished_runs(lines: Iterable[str]) -> dict[str, str]:
    """run id -> substrate of every rollout a scheduler log says finished."""
    found = {}
    for line in lines:
        match = _FINISHED.search(line)
        if match:
            found[match.group(2)] = match.group(1)
    return found


@dataclass
class Outcome:
    """Everything the suite observed; `tally` turns it into figures."""

    #: run id -> substrate, from the scheduler logs
    finished: dict[str, str] = field(default_factory=dict)
    #: run id -> (n_actions_done, action rows stored), from the database
    rows: dict[str, tuple[int, int]] = field(default_factory=dict)
    faults: Counter[str] = field(default_factory=Counter)
    #: substrate (or "local dirs", "unlabelled") -> environments left after the final reap
    leaked: dict[str, int] = field(default_factory=dict)
    #: substrates whose leftovers could not be listed at the end: their leak count is unknown,
    #: never taken for 0
    unchecked: list[str] = field(default_factory=list)
    locked_errors: int = 0
    scheduler_alive: bool = False
    #: file -> occurrences of a planted secret
    secrets: dict[str, int] = field(default_factory=dict)
    #: what the final reaper pass removed (informational: the pass is part of the design)
    reaped: int = 0
    #: records still in the spool at the end (not lost, but not in the database either)
    spooled: int = 0
    target: int = 0
    notes: list[str] = field(default_factory=list)


def lost(outcome: Outcome) -> list[str]:
    return sorted(set(outcome.finished) - set(outcome.rows))


def partial(outcome: Outcome) -> list[str]:
    return sorted(run for run, (done, stored) in outcome.rows.items() if stored < done)


def problems(outcome: Outcome) -> list[str]:
    """Why the run fails (empty: it passes): every must-be-zero row, the scheduler, the size,
    and every fault kind that never happened (a fault not injected proves nothing)."""
    out = []
    if len(outcome.finished) < outcome.target:
        out.append(f"only {len(outcome.finished)} rollouts finished (target {outcome.target})")
    missing = [k for k in FAULT_KINDS if outcome.faults.get(k, 0) == 0]
    if missing:
        out.append(f"faults never injected: {', '.join(missing)}")
    if sum(outcome.leaked.values()):
        out.append(f"{sum(outcome.leaked.values())} environments leaked")
    if outcome.unchecked:
        out.append(f"leftovers of {', '.join(outcome.unchecked)} could not be listed")
    if lost(outcome):
        out.append(f"{len(lost(outcome))} rows lost")
    if partial(outcome):
        out.append(f"{len(partial(outcome))} rows partial")
    if outcome.locked_errors:
        out.append(f"{outcome.locked_errors} 'database is locked' errors surfaced")
    if not outcome.scheduler_alive:
        out.append("the scheduler was not alive at the end")
    if sum(outcome.secrets.values()):
        out.append(f"{sum(outcome.secrets.values())} planted secrets found")
    return out


def exit_code(outcome: Outcome) -> int:
    return 1 if problems(outcome) else 0


def table(outcome: Outcome) -> str:
    """The one table `make faults` prints."""
    per_substrate = Counter(outcome.finished.values())
    rows: list[tuple[str, str, str]] = [
        (
            "rollouts",
            str(len(outcome.finished)),
            ", ".join(f"{k} {v}" for k, v in sorted(per_substrate.items())),
        ),
        ("rows stored", str(len(outcome.rows)), ""),
    ]
    for kind in FAULT_KINDS:
        rows.append((f"faults: {kind}", str(outcome.faults.get(kind, 0)), ""))
    leaked = {k: v for k, v in sorted(outcome.leaked.items()) if v}
    rows += [
        (
            "environments leaked (after reaper pass)",
            str(sum(outcome.leaked.values())),
            ", ".join(f"{k} {v}" for k, v in leaked.items()),
        ),
        (
            "  substrates not checked",
            str(len(outcome.unchecked)),
            ", ".join(outcome.unchecked),
        ),
        ("  removed by that reaper pass", str(outcome.reaped), "informational"),
        ("rows lost", str(len(lost(outcome))), " ".join(lost(outcome)[:3])),
        ("rows partial", str(len(partial(outcome))), " ".join(partial(outcome)[:3])),
        ("  records left in the spool", str(outcome.spooled), "informational"),
        ("'database is locked' surfaced", str(outcome.locked_errors), ""),
        ("scheduler alive", "yes" if outcome.scheduler_alive else "NO", ""),
        (
            "secrets found anywhere",
            str(sum(outcome.secrets.values())),
            ", ".join(f"{k} {v}" for k, v in sorted(outcome.secrets.items()) if v),
        ),
    ]
    width = max(len(r[0]) for r in rows)
    lines = [f"{name:<{width}}  {value:>6}  {detail}".rstrip() for name, value, detail in rows]
    verdict = problems(outcome)
    lines.append("")
    lines.append("PASS" if not verdict else "FAIL: " + "; ".join(verdict))
    return "\n".join([*lines, *outcome.notes])
