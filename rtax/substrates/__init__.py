"""Registry of substrate kinds by name, imported lazily.

Why lazy: `kubernetes`, `boto3` or `daytona` are slow to import and irrelevant to someone who only
probes `local`; a kind's module is imported the first time that kind is asked for (the fsspec
habit, docs/adding-a-substrate.md). Adding a substrate touches its own module and one line of `rtax.core.kinds`.
"""

from __future__ import annotations

import os
from typing import Any

from rtax.core import redaction
from rtax.core.kinds import NAMED as BUILT_IN
from rtax.core.kinds import SUBSTRATES, UnknownKind, load
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
