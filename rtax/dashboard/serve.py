"""Where the dashboard listens, and the one `streamlit run` command that says so.

Why one launcher (docs/dashboard.md#serving): Streamlit has no authentication and, left to
itself, listens on every interface, while the Data page shows endpoints, kube contexts, subnets
and security groups. So the dashboard listens on 127.0.0.1 unless the configuration's
``[dashboard]`` table or ``$RTAX_DASHBOARD_ADDRESS`` opens it, and `make run`, `make demo` and
the app image all start it through `rtax dashboard`, which resolves the address here. Imports
no Streamlit; the ``[dashboard]`` table itself is `rtax.settings.dashboard`.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from pathlib import Path

from rtax.core import paths
from rtax.settings.dashboard import ADDRESS_ENV, PORT_ENV, Dashboard
from rtax.settings.dashboard import address as address_of
from rtax.settings.dashboard import port as port_of


def resolve(
    configured: Dashboard,
    address: str | None = None,
    port: int | None = None,
    environ: Mapping[str, str] = os.environ,
) -> Dashboard:
    """Flags, else the environment, else the configuration, else 127.0.0.1:8501."""
    try:
        return Dashboard(
            address_of(address or environ.get(ADDRESS_ENV) or configured.address),
            port_of(port or environ.get(PORT_ENV) or configured.port),
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
