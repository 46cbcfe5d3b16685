"""Registry of substrate kinds by name, imported lazily.

Why lazy: `kubernetes`, `boto3` or `daytona` are slow to import and irrelevant to someone who only
probes `local`; a kind's module is imported the first time that kind is asked for (the fsspec
habit, docs/adding-a-substrate.md). Adding a substrate touches its own module and one line of
`rtax.core.kinds`.
"""

from __future__ import annotations

import os
from typing import Any

from rtax.core import redaction
from rtax.core.kinds import NAMED as BUILT_IN
from rtax.core.kinds import SUBSTRATES, UnknownKind, load
from rtax.core.series import UNKNOWN_FIDELITY
from rtax.substrates.base import Substrate

#: kind -> "module:Class" (`rtax.core.kinds`, where the configuration reads it too)
REGISTRY: dict[str, str] = SUBSTRATES

#: Built-in substrate names: name -> (kind, parameters). A configuration file adds more.
NAMED: dict[str, tuple[str, dict[str, Any]]] = BUILT_IN


class UnknownSubstrate(UnknownKind):
    """The kind is not in the registry."""


def kinds() -> list[str]:
    """Registered substrate kinds, sorted."""
    return sorted(REGISTRY)


def substrate_class(kind: str) -> type:
    """Import and return the class registered for `kind`."""
    try:
        return load(REGISTRY, kind)
    except UnknownKind as exc:
        raise UnknownSubstrate(str(exc)) from None


def get_substrate(kind: str, name: str | None = None, **params: Any) -> Substrate:
    """Build a substrate of `kind`, configured by `params`, named `name` (default: the kind)."""
    return substrate_class(kind)(name=name or kind, **params)


def names() -> list[str]:
    """Built-in substrate names, sorted."""
    return sorted(NAMED)


def build_substrate(conf: Any, overrides: dict[str, Any] | None = None) -> Substrate:
    """The substrate a configuration entry (`rtax.settings.SubstrateConfig`) describes: its
    parameters, each ``*_env`` one replaced by the value of the environment variable it names
    (read now, never stored), then `overrides`. The one place where a configured name becomes a
    substrate (CLI, scheduler, and a Ray node running a rollout)."""
    params = {k: v for k, v in conf.params.items() if not k.endswith("_env")}
    named = {k[:-4]: v for k, v in conf.params.items() if k.endswith("_env")}
    from_env = {k: os.environ[v] for k, v in named.items() if v in os.environ}
    redaction.register(*from_env.values())  # a credential read is a credential held
    params.update(from_env)
    params.update(overrides or {})
    return get_substrate(conf.kind, name=conf.name, **params)


def declared_fidelity(kind: str) -> str | None:
    """The fidelity a kind always has (``local`` and ``docker`` are real by construction), or
    None when it depends on where the substrate points (or the kind can't be imported here)."""
    try:
        declared = getattr(substrate_class(kind), "fidelity", None)
    except Exception:
        return None
    return declared if isinstance(declared, str) else None


def configured_fidelity(conf: Any) -> str:
    """The fidelity a row of a configuration entry (`rtax.settings.SubstrateConfig`) carries
    when its substrate could not be built: what the configuration says (``emulate = true`` sets
    ``emulated``), else what the kind always is, else `UNKNOWN_FIDELITY`: never a silent
    ``real`` for a cloud kind whose endpoint nobody has seen answer
    (docs/measurement.md#fidelity)."""
    if conf.emulate:
        return "emulated"
    if isinstance(conf.params.get("fidelity"), str):
        return conf.params["fidelity"]
    return declared_fidelity(conf.kind) or UNKNOWN_FIDELITY
