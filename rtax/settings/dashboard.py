"""The ``[dashboard]`` table: where the dashboard listens (docs/dashboard.md#serving).

Why in the settings and not beside the launcher: the configuration is checked without importing
the dashboard (`rtax.dashboard.serve` resolves flags and the environment over this table). The
default is loopback: Streamlit has no authentication and the Data page shows endpoints.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from rtax.core.checks import Bad, is_port, unknown_keys

LOOPBACK = "127.0.0.1"
DEFAULT_PORT = 8501
#: The environment's say, over the configuration's (the app image sets the address).
ADDRESS_ENV, PORT_ENV = "RTAX_DASHBOARD_ADDRESS", "RTAX_DASHBOARD_PORT"
_ANY = ("0.0.0.0", "::", "")


@dataclass(frozen=True)
class Dashboard:
    #: the interface to listen on; 0.0.0.0 (every one) only when asked for
    address: str = LOOPBACK
    port: int = DEFAULT_PORT

    @property
    def health_url(self) -> str:
        """Streamlit's health endpoint as this host reaches it (loopback when listening on all)."""
        host = LOOPBACK if self.address in _ANY else self.address
        host = f"[{host}]" if ":" in host else host
        return f"http://{host}:{self.port}/_stcore/health"


def port(value: Any) -> int:
    """A port to listen on, from the file, a flag or the environment (a string of digits)."""
    if isinstance(value, str) and value.strip().isdigit():
        value = int(value)
    if not is_port(value):
        raise ValueError(f"must be a port number (1-65535), got {value!r}")
    return value


def address(value: Any) -> str:
    """An interface to listen on: one word, no blanks (a hostname or an IP address)."""
    if not isinstance(value, str) or not value.strip() or any(c.isspace() for c in value):
        raise ValueError(f'must be an address to listen on (e.g. "127.0.0.1"), got {value!r}')
    return value


def parse(raw: Any, bad: Bad) -> Dashboard:
    """The ``[dashboard]`` table of a configuration; each mistake reported through `bad`."""
    if not isinstance(raw, dict):
        bad("dashboard", "must be a table")
        return Dashboard()
    unknown_keys(raw, "dashboard", {"address", "port"}, bad)
    found = Dashboard()
    for key, check in (("address", address), ("port", port)):
        if key in raw:
            try:
                found = replace(found, **{key: check(raw[key])})
            except ValueError as exc:
                bad(f"dashboard.{key}", str(exc))
    return found
