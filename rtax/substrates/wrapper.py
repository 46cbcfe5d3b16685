"""A launch path around a substrate: the whole protocol passed to the wrapped one.

Why one base (docs/measurement.md#launch-paths): the warm pool (`rtax.substrates.pool`) and the
restore path (`rtax.substrates.restore`) each add `Claims` to a substrate and change nothing
else of it; the reaper and the contract suite see the wrapped substrate through them. What they
pass through lives here once, so a protocol method added later reaches every path alike.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from rtax.substrates.base import CommandResult, Environment, Leftover, Substrate


class Wrapper:
    """Every `Substrate` call and attribute, passed to `inner`; subclasses add their launch."""

    inner: Substrate

    @property
    def name(self) -> str:
        return self.inner.name

    @property
    def kind(self) -> str:
        return self.inner.kind

    @property
    def fidelity(self) -> str:
        return self.inner.fidelity

    @property
    def mode(self) -> str:
        return self.inner.mode

    @property
    def host_address(self) -> str | None:
        return self.inner.host_address

    def prepare(self, log: Callable[[str], None]) -> None:
        self.inner.prepare(log)

    def create(self, run_id: str, *, lifetime_s: float | None = None) -> Environment:
        return self.inner.create(run_id, lifetime_s=lifetime_s)

    def wait_running(self, env: Environment, timeout_s: float) -> None:
        self.inner.wait_running(env, timeout_s)

    def run(self, env: Environment, command: str, timeout_s: float) -> CommandResult:
        return self.inner.run(env, command, timeout_s)

    def destroy(self, env: Environment, timeout_s: float) -> None:
        self.inner.destroy(env, timeout_s)

    def leftovers(self) -> list[Leftover]:
        return self.inner.leftovers()

    def describe(self) -> dict[str, Any]:
        return self.inner.describe()
