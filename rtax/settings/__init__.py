"""`rtax.toml`, read and checked: one module per table, every mistake one line naming its key
and file."""

from rtax.settings.config import DEFAULT_FILE, Config, ConfigError, find, load, parse
from rtax.settings.dashboard import Dashboard
from rtax.settings.engine import EngineSettings
from rtax.settings.loads import LoadError, LoadPlan
from rtax.settings.plans import Plan
from rtax.settings.pool import PoolSettings
from rtax.settings.prometheus import MetricsSettings
from rtax.settings.scheduler import Retention, SchedulerSettings
from rtax.settings.substrates import SubstrateConfig

__all__ = [
    "DEFAULT_FILE",
    "Config",
    "ConfigError",
    "Dashboard",
    "EngineSettings",
    "LoadError",
    "LoadPlan",
    "MetricsSettings",
    "Plan",
    "PoolSettings",
    "Retention",
    "SchedulerSettings",
    "SubstrateConfig",
    "find",
    "load",
    "parse",
]
