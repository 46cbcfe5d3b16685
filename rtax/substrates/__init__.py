"""Registry of substrate kinds by name, imported lazily.

Why lazy: `kubernetes`, `boto3` or `daytona` are slow to import and irrelevant to someone who only
probes `local`; a kind's module is imported the first time that kind is asked for (the fsspec
habit, docs/adding-a-substrate.md). Adding a substrate touches its own module and one line here.
"""

from __future__ import annotations

import importlib
from typing import Any

from rtax.substrates.base import Substrate

#: kind -> "module:Class"
REGISTRY: dict[str, str] = {
    "local": "rtax.substrates.local:LocalSubstrate",
    "docker": "rtax.substrates.docker.substrate:DockerSubstrate",
    "kubernetes": "rtax.substrates.kubernetes:KubernetesSubstrate",
    "ec2": "rtax.substrates.ec2:Ec2Substrate",
    "daytona": "rtax.substrates.daytona:DaytonaSubstrate",
    "podman": "rtax.substrates.podman:PodmanSubstrate",
}

#: Built-in substrate names: name -> (kind, parameters). A configuration file adds more.
NAMED: dict[str, tuple[str, dict[str, Any]]] = {
    "local": ("local", {}),
    "docker": ("docker", {}),
    "docker-gvisor": ("docker", {"runtime": "runsc"}),
    "podman": ("podman", {}),
    # The clouds, configured by their clients' usual environment (kubeconfig, AWS's credential
    # chain, DAYTONA_API_KEY); while `rtax emulate` runs, the CLI points them at the emulation.
    "kubernetes": ("kubernetes", {}),
    "ec2": ("ec2", {}),
    "daytona": ("daytona", {}),
}


class UnknownSubstrate(ValueError):
    """The kind is not in the registry."""


def kinds() -> list[str]:
    """Registered substrate kinds, sorted."""
    return sorted(REGISTRY)


def substrate_class(kind: str) -> type:
    """Import and return the class registered for `kind`."""
    try:
        target = REGISTRY[kind]
    except KeyError:
        known = ", ".join(kinds())
        raise UnknownSubstrate(f"unknown substrate kind {kind!r} (known: {known})") from None
    module_name, _, class_name = target.partition(":")
    return getattr(importlib.import_module(module_name), class_name)


def get_substrate(kind: str, name: str | None = None, **params: Any) -> Substrate:
    """Build a substrate of `kind`, configured by `params`, named `name` (default: the kind)."""
    return substrate_class(kind)(name=name or kind, **params)


def names() -> list[str]:
    """Built-in substrate names, sorted."""
    return sorted(NAMED)
