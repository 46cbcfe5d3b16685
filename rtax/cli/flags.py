"""What every command shares: its exit codes, the errors that end it in one line, and the flag
types (numbers and durations) that refuse bad input with a message naming the bound.

Why one place (docs/cli.md): a flag means the same on every command, and an error is one line on
stderr with exit code 2 whichever command met it.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from typing import NoReturn

from rtax.assets.attrs import FixtureError
from rtax.assets.image import ImageError
from rtax.assets.toolchain import ToolchainError
from rtax.compose import ComposeError
from rtax.core.checks import duration, is_number
from rtax.core.failures import HarnessError
from rtax.core.workloads import WorkloadError
from rtax.settings.loads import LoadError
from rtax.store.database import StoreError
from rtax.substrates import UnknownSubstrate

EXIT_USAGE = 2
#: Every rollout was measured, but some are not in the database yet (spooled) or were lost.
EXIT_NOT_STORED = 3
EXIT_INTERRUPTED = 130
EXIT_TERMINATED = 143
MAX_SEED = 2**63 - 1
#: Library errors that are the user's to fix: one line each, exit code 2.
ONE_LINE = (ComposeError, StoreError, FixtureError, WorkloadError, UnknownSubstrate)
ONE_LINE += (ImageError, ToolchainError, HarnessError, LoadError)


class UsageError(Exception):
    """Bad input from the user: one line on stderr, exit code 2."""


class Parser(argparse.ArgumentParser):
    """argparse, but an error is one line (no usage dump), still exit code 2."""

    def error(self, message: str) -> NoReturn:
        self.exit(EXIT_USAGE, f"{self.prog}: error: {message}\n")


def number(
    kind: type[int] | type[float] = int,
    *,
    low: float = 0,
    high: float | None = None,
    positive: bool = False,
) -> Callable[[str], float]:
    """The one argparse type for numbers: finite, of `kind`, in [`low`, `high`] (above 0 if
    `positive`); an error names the value and the bound it breaks."""
    noun = "whole number" if kind is int else "number"
    floor = "a positive number" if positive else "0 or more" if low == 0 else f"at least {low}"

    def parse(text: str) -> float:
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not a {noun}: {text!r}") from None
        if not is_number(value) or not (value > 0 if positive else value >= low):
            raise argparse.ArgumentTypeError(f"must be {floor}, got {text}")
        if high is not None and value > high:
            raise argparse.ArgumentTypeError(f"must be at most {high}, got {text}")
        return value

    return parse


def duration_flag(text: str) -> float:
    """A duration flag: seconds, or a number with a unit (250ms, 2s, 1m), above 0."""
    try:
        value = duration(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be above 0, got {text}")
    return value


def say(message: str) -> None:
    print(message, file=sys.stderr)
