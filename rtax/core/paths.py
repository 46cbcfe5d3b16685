"""Where rtax keeps its files.

Why one module: the database, the built fixture and the local substrate's environments must be
found in the same place by the CLI, the tests and (later) the scheduler, whatever the working
directory. `RTAX_DATA_DIR` moves everything; otherwise a checkout uses its own `data/` folder.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

_CHECKOUT_DATA = Path(__file__).resolve().parents[2] / "data"


def data_dir() -> Path:
    """The data folder: `$RTAX_DATA_DIR`, else the checkout's `data/`, else `./data`."""
    env = os.environ.get("RTAX_DATA_DIR")
    if env:
        return Path(env)
    if _CHECKOUT_DATA.is_dir():
        return _CHECKOUT_DATA
    return Path.cwd() / "data"


def default_db() -> Path:
    """The embedded default database (docs/data.md); `RTAX_DB` overrides it."""
    env = os.environ.get("RTAX_DB")
    return Path(env) if env else data_dir() / "rtax.db"


def fixtures_dir() -> Path:
    """The built attrs fixture (git-ignored; rebuilt by `rtax fixtures` when missing).
    `RTAX_FIXTURES_DIR` moves it (the app image builds it outside the data volume)."""
    env = os.environ.get("RTAX_FIXTURES_DIR")
    return Path(env) if env else data_dir() / "fixtures"


def toolchain_dir() -> Path:
    """Where the local floor's workload toolchain venvs live (docs/toolchain.md).
    `RTAX_TOOLCHAIN_DIR` moves them (the app image builds one outside the data volume)."""
    env = os.environ.get("RTAX_TOOLCHAIN_DIR")
    return Path(env) if env else data_dir() / "cache" / "toolchain"


def local_envs_dir() -> Path:
    """Where the local substrate makes its per-rollout working directories."""
    env = os.environ.get("RTAX_LOCAL_ROOT")
    return Path(env) if env else Path(tempfile.gettempdir()) / "rtax-local"


def spool_dir() -> Path:
    """Where a database's second spool file goes when the one beside it can't be written (a full
    disk under the database): `$RTAX_SPOOL_DIR`, else ``<temp dir>/rtax-spool``, as a rule on
    another file system (docs/measurement.md#failures)."""
    env = os.environ.get("RTAX_SPOOL_DIR")
    return Path(env) if env else Path(tempfile.gettempdir()) / "rtax-spool"


def checkout_root() -> Path:
    """The top of the checkout (where the shipped rtax.toml and app.py live)."""
    return _CHECKOUT_DATA.parent
