"""Where the dashboard listens, and the one `streamlit run` command that says so.

Why one launcher (docs/dashboard.md#serving): Streamlit has no authentication and, left to
itself, listens on every interface, while the Data page shows endpoints, kube contexts, subnets
and security groups. So the dashboard listens on 127.0.0.1 unless the configuration's
``[dashboard]`` table or ``$RTAX_DASHBOARD_ADDRESS`` opens it, and `make run`, `make demo` and
the app image all start it through `rtax dashboard`, which resolves the address here. Imports
no Streamlit: the configuration checks a ``[dashboard]`` table through `parse`.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from rtax.core import paths

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


def _port(value: Any) -> int:
    if isinstance(value, str) and value.strip().isdigit():
        value = int(value)
    if not isinstance(value, int) or isinstance(value, bool) or not 1 <= value <= 65535:
        raise ValueError(f"must be a port number (1-65535), got {value!r}")
    return value


def _address(value: Any) -> str:
    if not isinstance(value, str) or not value.strip() or any(c.isspace() for c in value):
        raise ValueError(f'must be an address to listen on (e.g. "127.0.0.1"), got {value!r}')
    return value


def parse(raw: Any, bad: Callable[[str, str], None]) -> Dashboard:
    """The ``[dashboard]`` table of a configuration; each mistake reported through `bad`."""
    if not isinstance(raw, dict):
        bad("dashboard", "must be a table")
        return Dashboard()
    for extra in set(raw) - {"address", "port"}:
        bad(f"dashboard.{extra}", "unknown key")
    found = Dashboard()
    for key, check in (("address", _address), ("port", _port)):
        if key in raw:
            try:
                found = replace(found, **{key: check(raw[key])})
            except ValueError as exc:
                bad(f"dashboard.{key}", str(exc))
    return found


def resolve(
    configured: Dashboard,
    address: str | None = None,
    port: int | None = None,
    environ: Mapping[str, str] = os.environ,
) -> Dashboard:
    """Flags, else the environment, else the configuration, else 127.0.0.1:8501."""
    try:
        return Dashboard(
            _address(address or environ.get(ADDRESS_ENV) or configured.address),
            _port(port or environ.get(PORT_ENV) or configured.port),
        )
    except ValueError as exc:
        raise ValueError(f"${ADDRESS_ENV} / ${PORT_ENV}: {exc}") from None


def app_path() -> Path:
    """The router: ./app.py (the app image's /app), else the checkout's."""
    here = Path.cwd() / "app.py"
    return here if here.is_file() else paths.checkout_root() / "app.py"


def command(where: Dashboard, app: Path | None = None) -> list[str]:
    """The `streamlit run` argv: the address and port always explicit, never Streamlit's
    default of every interface; the toolbar without Streamlit's deployment controls (a
    monitoring tool has nothing to deploy), whichever folder it starts from."""
    return [
        sys.executable,
        "-m",
        "streamlit",
        "run",
        str(app or app_path()),
        "--server.address",
        where.address,
        "--server.port",
        str(where.port),
        "--server.headless",
        "true",
        "--browser.gatherUsageStats",
        "false",
        "--client.toolbarMode",
        "minimal",
    ]
