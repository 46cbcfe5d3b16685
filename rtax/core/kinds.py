"""Every kind rtax knows, by name: substrates and their emulations, the built-in substrate names,
and the parameters that say where (and as whom) a substrate connects.

Why by name, in the shared vocabulary (docs/architecture.md#layers; the fsspec habit): the
configuration is checked against the kinds (is ``kind = "ec2"`` known, does it take ``region``,
has it an emulation) without importing any of them, since `kubernetes`, `boto3` and `daytona`
are slow to import and irrelevant to someone probing `local`. A kind's module is imported the
first time something asks for its class (`load`, `parameters`); `rtax.substrates` and
`rtax.emulation` build from these maps, so adding a kind is one line here and its own module.
"""

from __future__ import annotations

import importlib
import inspect
from typing import Any

#: substrate kind -> "module:Class"
SUBSTRATES: dict[str, str] = {
    "local": "rtax.substrates.local:LocalSubstrate",
    "docker": "rtax.substrates.docker:DockerSubstrate",
    "kubernetes": "rtax.substrates.kubernetes:KubernetesSubstrate",
    "ec2": "rtax.substrates.ec2:Ec2Substrate",
    "daytona": "rtax.substrates.daytona:DaytonaSubstrate",
    "podman": "rtax.substrates.podman:PodmanSubstrate",
}

#: Built-in substrate names: name -> (kind, parameters). A configuration file adds more.
NAMED: dict[str, tuple[str, dict[str, Any]]] = {
    "local": ("local", {}),
    "docker": ("docker", {}),
    "docker-gvisor": ("docker", {"runtime": "runsc", "snapshot_runtime": "runsc-checkpoint"}),
    "podman": ("podman", {}),
    # The clouds, configured by their clients' usual environment (kubeconfig, AWS's credential
    # chain, DAYTONA_API_KEY); while `rtax emulate` runs, the CLI points them at the emulation.
    "kubernetes": ("kubernetes", {}),
    "ec2": ("ec2", {}),
    "daytona": ("daytona", {}),
}

#: substrate kind -> "module:Class" of its local emulation (docs/emulations.md)
EMULATIONS: dict[str, str] = {
    "kubernetes": "rtax.emulation.kubernetes:KubernetesEmulation",
    "ec2": "rtax.emulation.ec2:Ec2Emulation",
    "daytona": "rtax.emulation.daytona:DaytonaEmulation",
}

#: Parameters that say *where* and *as whom* a substrate connects. Under an emulation they are
#: the emulation's alone: a configured real endpoint or credential would otherwise be probed (or
#: sent to the emulation) under the `emulated` label.
CONNECTION_PARAMS = frozenset(
    {
        "fidelity",
        "host",
        "kubeconfig",
        "context",
        "in_cluster",
        "token",
        "ca_cert",
        "verify_ssl",
        "endpoint",
        "profile",
        "region",
        "api_url",
        "api_key",
        "target",
    }
)


class UnknownKind(ValueError):
    """The name is not in the registry asked."""


def load(registry: dict[str, str], kind: str, what: str = "substrate kind") -> type:
    """Import and return the class `registry` holds for `kind` (its module on first use)."""
    try:
        target = registry[kind]
    except KeyError:
        known = ", ".join(sorted(registry))
        raise UnknownKind(f"unknown {what} {kind!r} (known: {known})") from None
    module_name, _, class_name = target.partition(":")
    return getattr(importlib.import_module(module_name), class_name)


def parameters(kind: str) -> set[str] | None:
    """The constructor parameters of a substrate kind (None: unknown, or it can't be imported
    here, e.g. its client library is missing)."""
    try:
        init = inspect.signature(load(SUBSTRATES, kind).__init__)
    except Exception:
        return None
    return {n for n in init.parameters if n not in ("self", "name")}


def connection_params(params: dict[str, Any]) -> list[str]:
    """The configured parameters (or their ``*_env`` forms) that an emulation must own."""
    return sorted(k for k in params if k.removesuffix("_env") in CONNECTION_PARAMS)
