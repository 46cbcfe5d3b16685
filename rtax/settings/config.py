"""The configuration file: which substrates to probe, with what, how often, kept how long.

Why one TOML file (docs/configuration.md): the scheduler runs for months unattended, so what it
does must be written down, reviewable, and checked before it runs: `rtax config check` reports
every mistake as one line naming its key. Credentials never appear as values: a parameter may
name an environment variable (``*_env``), and client libraries read their usual configuration.

Where the file is: ``--config PATH``, else ``$RTAX_CONFIG``, else ``rtax.toml`` in the current
folder, else the one shipped at the top of the checkout. Relative paths inside it (the
database) are relative to the file.

Each table has its module in `rtax.settings` (substrates, plans, scheduler, prometheus,
dashboard, alerts, slos, loads, engine); this one finds the file, reads it and calls their
parsers in turn, so that a mistake in one table never hides those in the next.
"""

from __future__ import annotations

import os
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rtax.analysis.envelope import Bounds
from rtax.analysis.maintenance import Window
from rtax.analysis.rules import Alerts, Detection
from rtax.analysis.slo import Objective
from rtax.analysis.status import StatusRules
from rtax.core import checks, paths
from rtax.core.kinds import NAMED
from rtax.settings import (
    alerts,
    engine,
    loads,
    maintenance,
    plans,
    prometheus,
    scheduler,
    slos,
    substrates,
)
from rtax.settings import dashboard as dashboard_table
from rtax.settings.dashboard import Dashboard
from rtax.settings.engine import EngineSettings
from rtax.settings.loads import LoadPlan
from rtax.settings.plans import Plan
from rtax.settings.prometheus import MetricsSettings
from rtax.settings.scheduler import Retention
from rtax.settings.substrates import SubstrateConfig

DEFAULT_FILE = "rtax.toml"
#: The top-level keys of the file: one table (or array of tables) each, plus the database.
_KEYS = frozenset(
    {"database", "substrates", "plans", "retention", "scheduler", "dashboard", "metrics"}
    | {"detection", "alerts", "status", "slos", "loads", "capacity", "engine", "maintenance"}
)


class ConfigError(ValueError):
    """Every mistake found, one line each (the first line is the message)."""

    def __init__(self, problems: list[str]) -> None:
        super().__init__("\n".join(problems))
        self.problems = problems


@dataclass(frozen=True)
class Config:
    """The whole file, checked: each table's settings (`rtax.settings`, one module per table)."""

    path: Path | None
    database: Path
    substrates: dict[str, SubstrateConfig]
    plans: tuple[Plan, ...]
    retention: Retention
    concurrency: int
    deadline_s: float
    misfire_grace_s: float
    #: how often the scheduler reaps expired and orphaned environments (it also does at start)
    reap_interval_s: float = 300.0
    #: where the dashboard listens (docs/dashboard.md#serving): 127.0.0.1 unless opened
    dashboard: Dashboard = field(default_factory=Dashboard)
    metrics: MetricsSettings = field(default_factory=MetricsSettings)
    #: change-point detection (docs/alerts.md#detection)
    detection: Detection = field(default_factory=Detection)
    #: alert rules and their webhook (docs/alerts.md)
    alerts: Alerts = field(default_factory=Alerts)
    #: the status board's rules (docs/alerts.md#status)
    status: StatusRules = field(default_factory=StatusRules)
    #: load plans for `rtax burst --load NAME` (docs/load.md)
    loads: tuple[LoadPlan, ...] = ()
    #: what breaks a substrate's envelope on the Capacity page (docs/load.md#the-envelope)
    capacity: Bounds = field(default_factory=Bounds)
    #: where rollouts run: this process's threads, or a Ray cluster (docs/ray.md)
    engine: EngineSettings = field(default_factory=EngineSettings)
    #: objectives with error budgets and burn-rate alerts (docs/alerts.md#objectives-slos)
    slos: tuple[Objective, ...] = ()
    #: maintenance windows planned in the file (docs/alerts.md#maintenance)
    maintenance: tuple[Window, ...] = ()


def find(explicit: str | os.PathLike[str] | None = None) -> Path:
    """The configuration file to use (see the module docstring)."""
    if explicit:
        return Path(explicit)
    if os.environ.get("RTAX_CONFIG"):
        return Path(os.environ["RTAX_CONFIG"])
    here = Path.cwd() / DEFAULT_FILE
    if here.is_file():
        return here
    return paths.checkout_root() / DEFAULT_FILE


def load(path: str | os.PathLike[str] | None = None) -> Config:
    """Read and check a configuration file; raise `ConfigError` listing every mistake."""
    file = find(path)
    try:
        raw = tomllib.loads(file.read_text())
    except FileNotFoundError:
        raise ConfigError([f"{file}: no such file"]) from None
    except OSError as exc:
        raise ConfigError([f"{file}: cannot read: {exc.strerror}"]) from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError([f"{file}: not valid TOML: {exc}"]) from None
    return parse(raw, base=file.resolve().parent, path=file)


def parse(raw: dict[str, Any], *, base: Path, path: Path | None = None) -> Config:
    """Check a parsed TOML document, table by table; every problem is one line naming its key
    (and the file, when there is one). Raise `ConfigError` listing them all."""
    problems: list[str] = []
    where = f"{path}: " if path else ""

    def bad(key: str, message: str) -> None:
        problems.append(f"{where}{key}: {message}")

    for key in raw:
        if key not in _KEYS:
            bad(key, f"unknown key (known: {', '.join(sorted(_KEYS))})")
    database = _database(raw.get("database", "data/rtax.db"), base, bad)
    subs = substrates.parse(raw.get("substrates", []), bad)
    plan_list = plans.parse(raw.get("plans", []), bad, subs)
    retention = scheduler.parse_retention(raw.get("retention", {}), bad)
    sched = scheduler.parse_scheduler(raw.get("scheduler", {}), bad)
    metrics = prometheus.parse(raw.get("metrics", {}), bad)
    dashboard = dashboard_table.parse(raw.get("dashboard", {}), bad)
    detection = alerts.parse_detection(raw.get("detection", {}), bad)
    alerting = alerts.parse_alerts(raw.get("alerts", {}), bad, set(subs), detection.window)
    windows = maintenance.parse(raw.get("maintenance", []), bad, set(subs))
    status = alerts.parse_status(raw.get("status", {}), bad, set(subs))
    taken = frozenset(r.name for r in alerting.rules)
    objectives = slos.parse(raw.get("slos", []), bad, set(subs), retention.raw_days, taken)

    def has_modes(name: str) -> bool | None:
        """A load may name a configured substrate or a built-in one."""
        kind = subs[name].kind if name in subs else NAMED.get(name, (None,))[0]
        return substrates.has_modes(kind)

    load_plans = loads.parse_loads(raw.get("loads", []), bad, set(subs) | set(NAMED), has_modes)
    capacity = loads.parse_capacity(raw.get("capacity", {}), bad)
    engine_settings = engine.parse(raw.get("engine"), bad)
    engine.check_plans(engine_settings, plan_list, subs.values(), bad)
    if problems:
        raise ConfigError(problems)
    return Config(
        path,
        database,
        subs,
        plan_list,
        retention,
        sched.concurrency,
        sched.deadline_s,
        sched.misfire_grace_s,
        sched.reap_interval_s,
        dashboard,
        metrics,
        detection,
        alerting,
        status,
        load_plans,
        capacity,
        engine_settings,
        objectives,
        windows,
    )


def _database(database: Any, base: Path, bad: checks.Bad) -> Path:
    """The database's path: absolute, or relative to the configuration file's folder."""
    if not checks.is_text(database):
        bad("database", "must be a file path (a string)")
        database = "data/rtax.db"
    return Path(database) if Path(database).is_absolute() else base / database


def database_of(path: str | os.PathLike[str]) -> Path | None:
    """The database a configuration file names, read without checking the rest of the file
    (a command that probes a built-in stays fast, and `rtax config check` reports mistakes);
    None when the file can't be read or names none."""
    file = Path(path)
    try:
        raw = tomllib.loads(file.read_text())
    except (OSError, tomllib.TOMLDecodeError):
        return None
    database = raw.get("database")
    if not checks.is_text(database):
        return None
    return _database(database, file.resolve().parent, lambda *_: None)
