"""Load plans and capacity bounds: the ``[[loads]]`` and ``[capacity]`` tables, checked.

Why a module of their own (docs/load.md): a load run is written down like a scheduler plan, so
that a burst that found a substrate's limit can be run again as it was, and the CLI's flags and
the configuration's tables pass the same checks (one line per mistake, naming its key). A load
plan is one tier on one substrate in one of three shapes:

- ``sequential``: `n` rollouts one after another (each launch is due when the previous ends);
- ``staggered``: `n` launches, one every `every_s` seconds, whatever the earlier ones are doing;
- ``burst``: `n` launches at once.

`Bounds` are what the envelope fit (`rtax.analysis.envelope`) calls broken. Nothing here runs
anything: `rtax.rollouts.burst` does.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from rtax.analysis.envelope import Bounds
from rtax.core import workloads
from rtax.core.checks import Bad, duration, is_number, is_text, is_whole, unknown_keys

SHAPES: tuple[str, ...] = ("sequential", "staggered", "burst")
#: Launches of one load run at most: one thread each, all started before the first launch.
MAX_ROLLOUTS = 1000
_LOAD_KEYS = frozenset({"name", "substrate", "tier", "steps", "shape", "n", "every", "mode"})
_CAPACITY_KEYS = frozenset({"ttfc_p95_max", "ttfc_p95_ratio_max", "failure_rate_max"})


class LoadError(ValueError):
    """A load plan that can't run as written; the message is one line for the user. `key`:
    the plan's field at fault (``n``, ``every``, ...), when it is one field's."""

    def __init__(self, message: str, key: str | None = None) -> None:
        super().__init__(f"{key}: {message}" if key else message)
        self.key = key
        self.reason = message


@dataclass(frozen=True)
class LoadPlan:
    """One load run's plan: `n` rollouts of `tier` (and `steps`) on `substrate`, in `shape`;
    `every_s` is the staggered shape's launch interval (None for the others)."""

    substrate: str
    tier: str = "T0"
    shape: str = "burst"
    n: int = 20
    every_s: float | None = None
    steps: int = 0
    mode: str | None = None
    #: the ``[[loads]]`` entry's name; None for a plan made from flags
    name: str | None = None

    def problems(self) -> list[tuple[str, str]]:
        """(key, message) for every way this plan can't run; empty when it can."""
        found: list[tuple[str, str]] = []
        if self.shape not in SHAPES:
            found.append(("shape", f"must be one of {', '.join(SHAPES)}, not {self.shape!r}"))
        if not is_whole(self.n, 1, MAX_ROLLOUTS):
            found.append(("n", f"must be a whole number from 1 to {MAX_ROLLOUTS}"))
        if self.shape == "staggered":
            if self.every_s is None:
                found.append(("every", "a staggered load needs the launch interval (every)"))
            elif not (math.isfinite(self.every_s) and self.every_s > 0):
                found.append(("every", "must be a duration > 0"))
        elif self.every_s is not None and self.shape in SHAPES:
            found.append(
                ("every", f"only a staggered load has a launch interval, not a {self.shape}")
            )
        try:
            workloads.validate(str(self.tier), self.steps)
        except workloads.WorkloadError as exc:
            found.append(("tier" if self.tier not in workloads.TIERS else "steps", str(exc)))
        if self.mode is not None and self.mode not in ("exec", "session"):
            found.append(("mode", "must be exec or session"))
        return found

    def check(self) -> LoadPlan:
        """This plan, or `LoadError` naming its first mistake."""
        problems = self.problems()
        if problems:
            key, message = problems[0]
            raise LoadError(message, key)
        return self

    @property
    def concurrency(self) -> int:
        """The most rollouts the shape itself puts in flight at once: 1 in sequence, all of
        them in a burst; a staggered load has no bound of its own (`n`: what it may reach)."""
        return 1 if self.shape == "sequential" else self.n

    def offsets(self) -> list[float] | None:
        """When each launch is due, in seconds after the load's start; None in sequence (each
        launch is due when the previous rollout ends)."""
        if self.shape == "sequential":
            return None
        if self.shape == "burst":
            return [0.0] * self.n
        assert self.every_s is not None
        return [i * self.every_s for i in range(self.n)]

    def describe(self) -> str:
        every = f" every {self.every_s * 1000:g} ms" if self.every_s is not None else ""
        steps = f" S={self.steps}" if self.steps else ""
        return f"{self.shape} of {self.n}{every}: {self.substrate} {self.tier}{steps}"


def parse_loads(
    entries: Any,
    bad: Bad,
    substrates: set[str],
    has_modes: Callable[[str], bool | None],
) -> tuple[LoadPlan, ...]:
    """The ``[[loads]]`` array; each mistake reported through `bad`. `substrates`: the names a
    load may use (configured and built in); `has_modes(name)`: whether that substrate has
    action modes (None: can't tell here)."""
    if not isinstance(entries, list):
        bad("loads", "must be an array of tables ([[loads]])")
        return ()
    plans: list[LoadPlan] = []
    names: set[str] = set()
    for i, entry in enumerate(entries):
        key = f"loads[{i}]"
        if not isinstance(entry, dict):
            bad(key, "must be a table")
            continue
        name = entry.get("name")
        if not is_text(name):
            bad(f"{key}.name", "missing (a non-empty string: `rtax burst --load NAME`)")
            continue
        key = f"loads.{name}"
        if name in names:
            bad(key, "defined twice")
        names.add(name)
        unknown_keys(entry, key, _LOAD_KEYS, bad, say_known=sorted(_LOAD_KEYS))
        substrate = entry.get("substrate")
        if not isinstance(substrate, str) or substrate not in substrates:
            bad(
                f"{key}.substrate",
                f"unknown substrate {substrate!r} (define it in [[substrates]] or use a "
                "built-in name)",
            )
            substrate = str(substrate)
        every = None
        if "every" in entry:
            try:
                every = duration(entry["every"])
            except ValueError as exc:
                bad(f"{key}.every", str(exc))
                every = None
        steps = entry.get("steps", 0)
        if not is_whole(steps):
            bad(f"{key}.steps", "must be a whole number")
            steps = 0
        plan = LoadPlan(
            substrate=substrate,
            tier=str(entry.get("tier", "T0")),
            shape=str(entry.get("shape", "burst")),
            n=entry.get("n", 20),
            every_s=every,
            steps=steps,
            mode=entry.get("mode"),
            name=name,
        )
        for field_key, message in plan.problems():
            if field_key == "every" and "every" in entry and every is None:
                continue  # already said why the duration does not parse
            bad(f"{key}.{field_key}", message)
        if plan.mode is not None and has_modes(plan.substrate) is False:
            bad(f"{key}.mode", f"substrate {plan.substrate!r} has no action modes")
        plans.append(plan)
    return tuple(plans)


def parse_capacity(raw: Any, bad: Bad) -> Bounds:
    """The ``[capacity]`` table (the envelope's bounds); each mistake reported through `bad`."""
    if not isinstance(raw, dict):
        bad("capacity", "must be a table")
        return Bounds()
    unknown_keys(raw, "capacity", _CAPACITY_KEYS, bad, say_known=sorted(_CAPACITY_KEYS))
    found = Bounds()
    absolute = found.ttfc_p95_max_s
    if "ttfc_p95_max" in raw:
        try:
            absolute = duration(raw["ttfc_p95_max"])
            if absolute <= 0:
                raise ValueError("must be a duration > 0")
        except ValueError as exc:
            bad("capacity.ttfc_p95_max", str(exc))
            absolute = None
    ratio = raw.get("ttfc_p95_ratio_max", found.ttfc_p95_ratio_max)
    if not is_number(ratio) or ratio < 1:
        bad("capacity.ttfc_p95_ratio_max", "must be a number >= 1 (a ratio to the lowest load)")
        ratio = found.ttfc_p95_ratio_max
    rate = raw.get("failure_rate_max", found.failure_rate_max)
    if not is_number(rate) or not 0 <= rate < 1:
        bad("capacity.failure_rate_max", "must be a fraction from 0 to below 1 (e.g. 0.05)")
        rate = found.failure_rate_max
    return Bounds(absolute, float(ratio), float(rate))
