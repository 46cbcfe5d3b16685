"""Where a sample came from (docs/measurement.md#provenance): the host and rtax that made it,
the versions of the libraries it depends on, and the substrate's own description.

Why apart from the record's fields: every row carries provenance, but what goes into it is read
from the machine and the substrate, not declared; the record (`rtax.core.record`) only stores
it, as a JSON column and the few columns derived from it.
"""

from __future__ import annotations

import platform
import socket
import sys
from importlib import metadata
from typing import Any, Protocol

from rtax.core.version import __version__


class Describes(Protocol):
    """What `provenance_of` needs of a substrate: its own description."""

    def describe(self) -> dict[str, Any]: ...


def origin() -> dict[str, Any]:
    """The least provenance every row has: the host it was made on and the rtax that made it."""
    return {"host": socket.gethostname(), "rtax_version": __version__}


def library_versions(names: tuple[str, ...] = ("sqlite-utils", "pandas")) -> dict[str, str]:
    """Installed versions of the libraries a sample depends on (provenance)."""
    found = {}
    for name in names:
        try:
            found[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            found[name] = "absent"
    return found


def provenance_of(substrate: Describes) -> dict[str, Any]:
    """What produced a sample (docs/measurement.md): host, versions, and the
    substrate's own description. A substrate that can't describe itself (an unreachable
    endpoint) is noted and the rollout goes on; the rest is rtax's own, and its failure is a
    harness error (the probe runner's `run_rollout` records it so)."""
    try:
        described = substrate.describe()
    except Exception as exc:
        described = {"describe_error": f"{type(exc).__name__}: {exc}"}
    return {
        **origin(),
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "libraries": library_versions(),
        "substrate": described,
    }
