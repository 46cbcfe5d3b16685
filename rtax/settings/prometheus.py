"""The ``[metrics]`` table: where the scheduler serves its Prometheus ``/metrics``
(docs/metrics.md#configuration).

Why a module of its own: the exporter (`rtax.service.prometheus`) takes these settings as they
are, and the file's reader checks them without importing the service. On by default, on
loopback only: the endpoint names substrates and hosts.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from rtax.core.checks import Bad, is_bool, is_port, is_text, unknown_keys


@dataclass(frozen=True)
class MetricsSettings:
    """The scheduler's Prometheus endpoint (docs/metrics.md): on by default, on loopback only."""

    enabled: bool = True
    address: str = "127.0.0.1"
    port: int = 9470


def parse(table: Any, bad: Bad) -> MetricsSettings:
    """The ``[metrics]`` table, each mistake reported through `bad`."""
    default = MetricsSettings()
    if not isinstance(table, dict):
        bad("metrics", "must be a table")
        return default
    unknown_keys(table, "metrics", {"enabled", "address", "port"}, bad)
    enabled, address = table.get("enabled", default.enabled), table.get("address", default.address)
    port = table.get("port", default.port)
    if not is_bool(enabled):
        bad("metrics.enabled", "must be true or false")
    if not is_text(address):
        bad("metrics.address", 'must be an address to listen on (e.g. "127.0.0.1")')
    if not is_port(port, low=0):
        bad("metrics.port", "must be a port number, 0-65535 (0: any free port)")
    return MetricsSettings(enabled is True, str(address), port if isinstance(port, int) else 0)
