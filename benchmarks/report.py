"""What every `make bench` script prints, and nothing else: its figures, each target line
ending in "meets target" or "MISSES target", and a one-line summary (docs/benchmarks.md).

Why a shared sibling script (like synthetic.py, not a package): the four benchmarks run as
plain scripts, and a reader must find a verdict without reading the libraries' chatter, so
each process silences library warnings and logging the same way before it measures.
"""

from __future__ import annotations

import logging
import warnings
from dataclasses import dataclass, field

MEETS, MISSES = "meets target", "MISSES target"


def quiet() -> None:
    """Silence library warnings and log records below errors in this process. (Streamlit's
    AppTest says "missing ScriptRunContext" for every cached read, and Streamlit resets its
    own loggers' levels on each run, so the cut is made at logging's own switch.)"""
    logging.disable(logging.WARNING)
    warnings.simplefilter("ignore")


def verdict(ok: bool) -> str:
    return MEETS if ok else MISSES


@dataclass
class Report:
    """The target lines of one benchmark, counted for its summary."""

    name: str
    met: list[str] = field(default_factory=list)
    missed: list[str] = field(default_factory=list)

    def target(self, label: str, line: str, ok: bool) -> None:
        """Print `line` ending in its verdict, and count it under `label`."""
        (self.met if ok else self.missed).append(label)
        print(f"{line}: {verdict(ok)}")

    def summary(self) -> str:
        """The last line: how many targets were met, and which were missed."""
        total = len(self.met) + len(self.missed)
        if not self.missed:
            return f"rtax bench ({self.name}) summary: all {total} targets met"
        return (
            f"rtax bench ({self.name}) summary: {len(self.missed)} of {total} targets MISSED "
            f"({', '.join(self.missed)})"
        )

    @property
    def ok(self) -> bool:
        return not self.missed
