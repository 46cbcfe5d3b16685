"""The ``[[substrates]]`` array: each substrate rtax may probe, its kind, parameters, budgets,
emulation, limits, prices and warm pool (docs/configuration.md#configuration).

Why by name only: a kind is checked against `rtax.core.kinds` (is it known, which parameters
does its constructor take, has it an emulation) without importing it, so checking a file never
imports `kubernetes`, `boto3` or `daytona`. Credentials never appear as values: a parameter
that looks like one must name an environment variable instead (docs/configuration.md#secrets).
The entry's ``limits``, ``prices`` and ``pool`` tables have modules of their own
(`rtax.settings.prices`, `rtax.settings.pool`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from rtax.core.checks import Bad, is_bool, is_env_name, is_positive, is_text, is_whole, unknown_keys
from rtax.core.kinds import EMULATIONS, connection_params, parameters
from rtax.core.kinds import SUBSTRATES as REGISTRY
from rtax.planning.pricing import Limits, Prices
from rtax.settings import pool, prices
from rtax.settings.pool import PoolSettings

#: Parameter names that look like secrets: their values must not be in the file.
_SECRET = re.compile(r"(password|passwd|secret|token|api_?key|access_?key|credential)", re.I)
_KEYS = frozenset(
    {
        "name",
        "kind",
        "params",
        "optional",
        "max_rollouts_per_day",
        "max_env_minutes_per_day",
        "emulate",
        "limits",
        "prices",
        "pool",
        "launch",
    }
)
#: How its rollouts get an environment (docs/measurement.md#launch-paths): made (``cold``), from
#: the warm pool (``pool``, no ``launch``), restored from a snapshot of the tier (``restore``),
#: or thawed from a pool of paused ones (``resume``, with ``pool``).
LAUNCHES = ("cold", "restore", "resume")


@dataclass(frozen=True)
class SubstrateConfig:
    name: str
    kind: str
    params: dict[str, Any] = field(default_factory=dict)
    #: skip (with a log line) when it can't be set up, instead of failing its plans
    optional: bool = False
    #: budgets per day since midnight UTC (None: unlimited); probing clouds costs money
    max_rollouts_per_day: int | None = None
    #: environment-minutes (create request to verified deletion, summed over rollouts)
    max_env_minutes_per_day: float | None = None
    #: probe the local emulation of this kind (docs/emulations.md), never the real service
    emulate: bool = False
    #: the account's limits and the prices, each with source and date (rtax/planning/pricing.py)
    limits: Limits = field(default_factory=Limits)
    prices: Prices = field(default_factory=Prices)
    #: keep a warm pool of its environments, which rollouts claim
    #: (docs/configuration.md#warm-pools)
    pool: PoolSettings | None = None
    #: ``cold`` (or warm, with a pool), ``restore`` or ``resume`` (`LAUNCHES`)
    launch: str = "cold"


def has_modes(kind: str | None) -> bool | None:
    """Whether a substrate of `kind` has action modes (exec, session); None: can't tell here
    (an unknown kind, or one whose module can't be imported)."""
    takes = parameters(kind) if kind in REGISTRY else None
    return None if takes is None else "mode" in takes


def parse(entries: Any, bad: Bad) -> dict[str, SubstrateConfig]:
    """The ``[[substrates]]`` array, by name; each mistake reported through `bad`."""
    substrates: dict[str, SubstrateConfig] = {}
    if not isinstance(entries, list):
        bad("substrates", "must be an array of tables ([[substrates]])")
        entries = []
    for i, entry in enumerate(entries):
        conf = _entry(i, entry, bad, substrates)
        if conf is not None:
            substrates[conf.name] = conf
    return substrates


def _entry(
    i: int, entry: Any, bad: Bad, seen: dict[str, SubstrateConfig]
) -> SubstrateConfig | None:
    key = f"substrates[{i}]"
    if not isinstance(entry, dict):
        bad(key, "must be a table")
        return None
    unknown_keys(entry, key, _KEYS, bad)
    name, kind = entry.get("name"), entry.get("kind")
    if not is_text(name):
        bad(f"{key}.name", "missing (a non-empty string)")
        return None
    key = f"substrates.{name}"
    if name in seen:
        bad(f"{key}", "defined twice")
    if not isinstance(kind, str) or kind not in REGISTRY:
        bad(f"{key}.kind", f"unknown kind {kind!r} (known: {', '.join(sorted(REGISTRY))})")
        kind = None
    params = entry.get("params", {})
    if not isinstance(params, dict):
        bad(f"{key}.params", "must be a table")
        params = {}
    _check_params(key, kind, params, bad)
    optional = entry.get("optional", False)
    if not is_bool(optional):
        bad(f"{key}.optional", "must be true or false")
    budget = entry.get("max_rollouts_per_day")
    if budget is not None and not is_whole(budget, low=1):
        bad(f"{key}.max_rollouts_per_day", "must be a whole number >= 1")
    minutes = entry.get("max_env_minutes_per_day")
    if minutes is not None and not is_positive(minutes):
        bad(f"{key}.max_env_minutes_per_day", "must be a number of minutes > 0")
        minutes = None
    emulate = entry.get("emulate", False)
    _check_emulate(key, kind, params, emulate, bad)
    launch = entry.get("launch", "cold")
    if launch not in LAUNCHES:
        bad(f"{key}.launch", f"must be one of {', '.join(LAUNCHES)}, got {launch!r}")
        launch = "cold"
    elif launch == "resume" and "pool" not in entry:
        bad(f"{key}.launch", "resume thaws a pool of paused environments: add pool = {size = N}")
    elif launch == "restore" and "pool" in entry:
        bad(f"{key}.pool", "a restore makes a fresh environment per rollout: drop the pool")
    return SubstrateConfig(
        name,
        str(kind),
        dict(params),
        bool(optional),
        budget if isinstance(budget, int) else None,
        float(minutes) if minutes is not None else None,
        emulate is True,
        prices.parse_limits(entry.get("limits"), f"{key}.limits", bad),
        prices.parse_prices(entry.get("prices"), f"{key}.prices", bad),
        pool.parse(entry["pool"], f"{key}.pool", bad) if "pool" in entry else None,
        str(launch),
    )


def _check_params(key: str, kind: str | None, params: dict[str, Any], bad: Bad) -> None:
    """Parameters the kind's constructor takes (``*_env``: the same, read from the environment
    variable it names), none that look like a credential."""
    accepted = parameters(kind) if kind else None
    if accepted is not None:
        for pname in params:
            base_name = pname[:-4] if pname.endswith("_env") else pname
            if base_name not in accepted:
                bad(
                    f"{key}.params.{pname}",
                    f"a {kind} substrate takes no such parameter "
                    f"(it takes: {', '.join(sorted(accepted))})",
                )
    for pname, value in params.items():
        if _SECRET.search(pname) and not pname.endswith("_env"):
            bad(
                f"{key}.params.{pname}",
                "looks like a credential: never put secrets in "
                f'the file; name an environment variable instead ({pname}_env = "VAR")',
            )
        if pname.endswith("_env") and not is_env_name(value):
            bad(
                f"{key}.params.{pname}",
                'must name an environment variable (e.g. "AWS_PROFILE")',
            )


def _check_emulate(
    key: str, kind: str | None, params: dict[str, Any], emulate: Any, bad: Bad
) -> None:
    """``emulate = true`` needs a kind with an emulation, which then says where and as whom to
    connect (docs/emulations.md)."""
    if not is_bool(emulate):
        bad(f"{key}.emulate", "must be true or false")
    elif emulate and kind and kind not in EMULATIONS:
        bad(f"{key}.emulate", f"a {kind} substrate has no emulation")
    elif emulate:
        for pname in connection_params(params):
            bad(
                f"{key}.params.{pname}",
                "where and as whom to connect is the emulation's when emulate = true "
                "(remove it, or drop emulate to probe the real service)",
            )
