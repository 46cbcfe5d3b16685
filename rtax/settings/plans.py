"""The ``[[plans]]`` array: what the scheduler runs, on which substrates, how often
(docs/configuration.md#configuration).

Why a module of its own: a plan is checked against the substrates the same file defines (it
may only name those, and a mode only where the kind has modes), so it is read after them;
its vantages are checked by the engine's rules (`rtax.settings.engine`), since only a Ray engine
can honour them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from rtax.core import workloads
from rtax.core.checks import (
    Bad,
    duration,
    is_text,
    is_whole,
    names,
    positive_duration,
    unknown_keys,
)
from rtax.settings import engine
from rtax.settings.substrates import SubstrateConfig, has_modes

_KEYS = frozenset(
    {"name", "substrates", "tier", "steps", "repeat", "interval", "jitter", "mode", "vantages"}
)


@dataclass(frozen=True)
class Plan:
    name: str
    substrates: tuple[str, ...]
    tier: str
    steps: int
    repeat: int
    interval_s: float
    jitter_s: float
    mode: str | None = None
    #: the vantages each rollout runs from (docs/ray.md#vantages); None: the engine's
    vantages: tuple[str, ...] | None = None


def parse(entries: Any, bad: Bad, substrates: dict[str, SubstrateConfig]) -> tuple[Plan, ...]:
    """The ``[[plans]]`` array; each mistake reported through `bad`. `substrates`: the
    configured ones, the only names a plan may use."""
    if not isinstance(entries, list):
        bad("plans", "must be an array of tables ([[plans]])")
        entries = []
    plans: list[Plan] = []
    seen: set[str] = set()
    for i, entry in enumerate(entries):
        key = f"plans[{i}]"
        if not isinstance(entry, dict):
            bad(key, "must be a table")
            continue
        name = entry.get("name", f"plan{i}")
        if not is_text(name):
            bad(f"{key}.name", "must be a non-empty string")
            name = f"plan{i}"
        if name in seen:
            bad(f"plans.{name}", "defined twice")
        seen.add(name)
        plans.append(_plan(f"plans.{name}", str(name), entry, bad, substrates))
    return tuple(plans)


def _plan(
    key: str, name: str, entry: dict[str, Any], bad: Bad, substrates: dict[str, SubstrateConfig]
) -> Plan:
    unknown_keys(entry, key, _KEYS, bad)
    subs = names(entry.get("substrates"))
    if not subs:
        bad(f"{key}.substrates", "must be a non-empty list of substrate names")
        subs = []
    for s in subs:
        if s not in substrates:
            bad(f"{key}.substrates", f"unknown substrate {s!r} (define it in [[substrates]])")
    tier = entry.get("tier")
    steps = entry.get("steps", 0)
    if not is_whole(steps):
        bad(f"{key}.steps", "must be a whole number")
        steps = 0
    try:
        workloads.validate(str(tier), steps)
    except workloads.WorkloadError as exc:
        bad(f"{key}.tier" if tier not in workloads.TIERS else f"{key}.steps", str(exc))
    repeat = entry.get("repeat", 1)
    if not is_whole(repeat, low=1):
        bad(f"{key}.repeat", "must be a whole number >= 1")
        repeat = 1
    interval, jitter = _timing(key, entry, bad)
    mode = entry.get("mode")
    if mode is not None and mode not in ("exec", "session"):
        bad(f"{key}.mode", "must be exec or session")
    elif mode is not None:
        for s_name in subs:
            conf = substrates.get(s_name)
            if conf and has_modes(conf.kind) is False:
                bad(f"{key}.mode", f"substrate {s_name!r} ({conf.kind}) has no action modes")
    vantages = None
    if "vantages" in entry:
        vantages = engine.vantage_list(entry["vantages"], f"{key}.vantages", bad)
    return Plan(name, tuple(subs), str(tier), steps, repeat, interval, jitter, mode, vantages)


def _timing(key: str, entry: dict[str, Any], bad: Bad) -> tuple[float, float]:
    """A plan's interval (default 10 min) and its jitter, shorter than the interval."""
    try:
        interval = positive_duration(entry.get("interval", "10m"))
    except ValueError as exc:
        bad(f"{key}.interval", str(exc))
        interval = 600.0
    try:
        jitter = duration(entry.get("jitter", 0))
        if jitter < 0 or jitter >= interval:
            raise ValueError("must be >= 0 and shorter than the interval")
    except ValueError as exc:
        bad(f"{key}.jitter", str(exc))
        jitter = 0.0
    return interval, jitter
