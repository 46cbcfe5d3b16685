"""rtax: live, honest measurement of the rollout infrastructure tax.

The library is the product; the CLI (`rtax.cli`) and the dashboard only call into it. What a
library user calls is exported here (docs/library.md); everything else is reachable by its
package (docs/architecture.md). See docs/measurement.md for what every number means.

Why lazily (PEP 562, the fsspec habit): ``import rtax`` must stay cheap for the processes that
only need one corner of it (a Ray task, ``python -m rtax.faultsuite``, a page), and must not
import the cloud clients or pandas until a name that needs them is asked for.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from rtax.core.version import __version__

#: name -> "module:attribute", imported on first use
_API: dict[str, str] = {
    # run rollouts: a batch (`rtax probe`), a load run (`rtax burst`), one rollout
    "Probe": "rtax.rollouts.probe:Probe",
    "ProbeResult": "rtax.rollouts.probe:ProbeResult",
    "probe": "rtax.rollouts.probe:probe",
    "LoadPlan": "rtax.settings.loads:LoadPlan",
    "BurstResult": "rtax.rollouts.burst:BurstResult",
    "burst": "rtax.rollouts.burst:burst",
    "run_rollout": "rtax.rollouts.rollout:run_rollout",
    "RolloutOptions": "rtax.core.options:RolloutOptions",
    # the store
    "Store": "rtax.store:Store",
    "StoreError": "rtax.store:StoreError",
    "open_store": "rtax.compose:open_store",
    # the configuration
    "Config": "rtax.settings.config:Config",
    "ConfigError": "rtax.settings.config:ConfigError",
    "load_config": "rtax.settings.config:load",
    # substrates, by name
    "Substrate": "rtax.substrates.base:Substrate",
    "get_substrate": "rtax.substrates:get_substrate",
    "substrate_names": "rtax.substrates:names",
    # the record types and the vocabulary
    "RolloutRecord": "rtax.core.record:RolloutRecord",
    "RolloutIdentity": "rtax.core.record:RolloutIdentity",
    "RUN_COLUMNS": "rtax.core.record:RUN_COLUMNS",
    "ACTION_COLUMNS": "rtax.core.record:ACTION_COLUMNS",
    "Series": "rtax.core.series:Series",
    "Workload": "rtax.core.workloads:Workload",
    "build_workload": "rtax.core.workloads:build",
    "SubstrateError": "rtax.core.failures:SubstrateError",
}

__all__ = [
    "ACTION_COLUMNS",
    "RUN_COLUMNS",
    "BurstResult",
    "Config",
    "ConfigError",
    "LoadPlan",
    "Probe",
    "ProbeResult",
    "RolloutIdentity",
    "RolloutOptions",
    "RolloutRecord",
    "Series",
    "Store",
    "StoreError",
    "Substrate",
    "SubstrateError",
    "Workload",
    "__version__",
    "build_workload",
    "burst",
    "get_substrate",
    "load_config",
    "open_store",
    "probe",
    "run_rollout",
    "substrate_names",
]


def __getattr__(name: str) -> Any:
    try:
        module, _, attribute = _API[name].partition(":")
    except KeyError:
        raise AttributeError(f"module 'rtax' has no attribute {name!r}") from None
    value = getattr(importlib.import_module(module), attribute)
    globals()[name] = value  # once imported, an ordinary attribute
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})


if TYPE_CHECKING:  # what a type checker and an editor see
    from rtax.compose import open_store
    from rtax.core.failures import SubstrateError
    from rtax.core.options import RolloutOptions
    from rtax.core.record import (
        ACTION_COLUMNS,
        RUN_COLUMNS,
        RolloutIdentity,
        RolloutRecord,
    )
    from rtax.core.series import Series
    from rtax.core.workloads import Workload
    from rtax.core.workloads import build as build_workload
    from rtax.rollouts.burst import BurstResult, burst
    from rtax.rollouts.probe import Probe, ProbeResult, probe
    from rtax.rollouts.rollout import run_rollout
    from rtax.settings.config import Config, ConfigError
    from rtax.settings.config import load as load_config
    from rtax.settings.loads import LoadPlan
    from rtax.store import Store, StoreError
    from rtax.substrates import get_substrate
    from rtax.substrates import names as substrate_names
    from rtax.substrates.base import Substrate
