"""The configuration file: which substrates to probe, with what, how often, kept how long.

Why one TOML file (docs/configuration.md): the scheduler runs for months unattended, so what it
does must be written down, reviewable, and checked before it runs: `rtax config check` reports
every mistake as one line naming its key. Credentials never appear as values: a parameter may
name an environment variable (``*_env``), and client libraries read their usual configuration.

Where the file is: ``--config PATH``, else ``$RTAX_CONFIG``, else ``rtax.toml`` in the current
folder, else the one shipped at the top of the checkout. Relative paths inside it (the
database) are relative to the file.
"""

from __future__ import annotations

import math
import os
import re
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rtax.analysis import rules
from rtax.analysis.status import StatusRules
from rtax.core import paths, workloads
from rtax.core.kinds import EMULATIONS, NAMED, connection_params, parameters
from rtax.core.kinds import SUBSTRATES as REGISTRY
from rtax.planning import pricing
from rtax.settings import alerts as alert_tables
from rtax.settings import engine as engine_settings
from rtax.settings import loads as loadplan
from rtax.settings import prices as price_tables
from rtax.settings.dashboard import Dashboard
from rtax.settings.dashboard import parse as parse_dashboard
from rtax.settings.pool import PoolSettings

DEFAULT_FILE = "rtax.toml"
#: Parameter names that look like secrets: their values must not be in the file.
_SECRET = re.compile(r"(password|passwd|secret|token|api_?key|access_?key|credential)", re.I)
_SUBSTRATE_KEYS = frozenset(
    {
        "name",
        "kind",
        "params",
        "optional",
        "max_rollouts_per_day",
        "max_env_minutes_per_day",
        "emulate",
        "limits",
        "prices",
        "pool",
    }
)
_POOL_KEYS = ("size", "refill_concurrency", "max_idle")
_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|min|h|d)?\s*$")
_UNITS = {None: 1.0, "ms": 0.001, "s": 1.0, "m": 60.0, "min": 60.0, "h": 3600.0, "d": 86400.0}


class ConfigError(ValueError):
    """Every mistake found, one line each (the first line is the message)."""

    def __init__(self, problems: list[str]) -> None:
        super().__init__("\n".join(problems))
        self.problems = problems


@dataclass(frozen=True)
class SubstrateConfig:
    name: str
    kind: str
    params: dict[str, Any] = field(default_factory=dict)
    #: skip (with a log line) when it can't be set up, instead of failing its plans
    optional: bool = False
    #: budgets per day since midnight UTC (None: unlimited); probing clouds costs money
    max_rollouts_per_day: int | None = None
    #: environment-minutes (create request to verified deletion, summed over rollouts)
    max_env_minutes_per_day: float | None = None
    #: probe the local emulation of this kind (docs/emulations.md), never the real service
    emulate: bool = False
    #: the account's limits and the prices, each with source and date (rtax/planning/pricing.py)
    limits: pricing.Limits = field(default_factory=pricing.Limits)
    prices: pricing.Prices = field(default_factory=pricing.Prices)
    #: keep a warm pool of its environments, which rollouts claim
    #: (docs/configuration.md#warm-pools)
    pool: PoolSettings | None = None


@dataclass(frozen=True)
class Plan:
    name: str
    substrates: tuple[str, ...]
    tier: str
    steps: int
    repeat: int
    interval_s: float
    jitter_s: float
    mode: str | None = None
    #: the vantages each rollout runs from (docs/ray.md#vantages); None: the engine's
    vantages: tuple[str, ...] | None = None


@dataclass(frozen=True)
class Retention:
    raw_days: float
    bucket: str  # "hour" or "day"


@dataclass(frozen=True)
class MetricsSettings:
    """The scheduler's Prometheus endpoint (docs/metrics.md): on by default, on loopback only."""

    enabled: bool = True
    address: str = "127.0.0.1"
    port: int = 9470


@dataclass(frozen=True)
class Config:
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
    metrics: MetricsSettings = MetricsSettings()
    #: change-point detection (docs/alerts.md#detection)
    detection: rules.Detection = field(default_factory=rules.Detection)
    #: alert rules and their webhook (docs/alerts.md)
    alerts: rules.Alerts = field(default_factory=rules.Alerts)
    #: the status board's rules (docs/alerts.md#status)
    status: StatusRules = field(default_factory=StatusRules)
    #: load plans for `rtax burst --load NAME` (docs/load.md)
    loads: tuple[loadplan.LoadPlan, ...] = ()
    #: what breaks a substrate's envelope on the Capacity page (docs/load.md#the-envelope)
    capacity: loadplan.Bounds = field(default_factory=loadplan.Bounds)
    #: where rollouts run: this process's threads, or a Ray cluster (docs/ray.md)
    engine: engine_settings.EngineSettings = field(default_factory=engine_settings.EngineSettings)


def duration(value: Any) -> float:
    """Seconds from a number or a string such as "90s", "10m", "1.5h", "2d"."""
    if isinstance(value, bool):
        raise ValueError("not a duration")
    if isinstance(value, (int, float)):
        seconds = float(value)
    else:
        match = _DURATION.match(str(value))
        if not match:
            raise ValueError(f"not a duration: {value!r} (use e.g. 30s, 10m, 2h, 1d)")
        seconds = float(match.group(1)) * _UNITS[match.group(2)]
    if not math.isfinite(seconds):
        raise ValueError(f"not a finite duration: {value!r}")
    return seconds


def _parameters(kind: str) -> set[str] | None:
    """The constructor parameters of a substrate kind (None if it can't be imported here)."""
    return parameters(kind)


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
    """Check a parsed TOML document; every problem is one line naming its key."""
    problems: list[str] = []
    where = f"{path}: " if path else ""

    def bad(key: str, message: str) -> None:
        problems.append(f"{where}{key}: {message}")

    known = {"database", "substrates", "plans", "retention", "scheduler", "dashboard", "metrics"}
    known |= {"detection", "alerts", "status", "loads", "capacity", "engine"}
    for key in raw:
        if key not in known:
            bad(key, f"unknown key (known: {', '.join(sorted(known))})")

    database = raw.get("database", "data/rtax.db")
    if not isinstance(database, str) or not database:
        bad("database", "must be a file path (a string)")
        database = "data/rtax.db"
    db_path = Path(database) if Path(database).is_absolute() else base / database

    substrates: dict[str, SubstrateConfig] = {}
    entries = raw.get("substrates", [])
    if not isinstance(entries, list):
        bad("substrates", "must be an array of tables ([[substrates]])")
        entries = []
    for i, entry in enumerate(entries):
        key = f"substrates[{i}]"
        if not isinstance(entry, dict):
            bad(key, "must be a table")
            continue
        for extra in set(entry) - _SUBSTRATE_KEYS:
            bad(f"{key}.{extra}", "unknown key")
        name, kind = entry.get("name"), entry.get("kind")
        if not isinstance(name, str) or not name:
            bad(f"{key}.name", "missing (a non-empty string)")
            continue
        key = f"substrates.{name}"
        if name in substrates:
            bad(f"{key}", "defined twice")
        if not isinstance(kind, str) or kind not in REGISTRY:
            bad(f"{key}.kind", f"unknown kind {kind!r} (known: {', '.join(sorted(REGISTRY))})")
            kind = None
        params = entry.get("params", {})
        if not isinstance(params, dict):
            bad(f"{key}.params", "must be a table")
            params = {}
        accepted = _parameters(kind) if kind else None
        if accepted is not None:
            for pname in params:
                base_name = pname[:-4] if pname.endswith("_env") else pname
                if base_name not in accepted:
                    bad(
                        f"{key}.params.{pname}",
                        f"a {kind} substrate takes no such parameter "
                        f"(it takes: {', '.join(sorted(accepted))})",
                    )
        for pname, value in params.items():
            if _SECRET.search(pname) and not pname.endswith("_env"):
                bad(
                    f"{key}.params.{pname}",
                    "looks like a credential: never put secrets in "
                    f'the file; name an environment variable instead ({pname}_env = "VAR")',
                )
            if pname.endswith("_env") and not (
                isinstance(value, str) and re.fullmatch(r"[A-Z_][A-Z0-9_]*", value)
            ):
                bad(
                    f"{key}.params.{pname}",
                    'must name an environment variable (e.g. "AWS_PROFILE")',
                )
        optional = entry.get("optional", False)
        if not isinstance(optional, bool):
            bad(f"{key}.optional", "must be true or false")
        budget = entry.get("max_rollouts_per_day")
        if budget is not None and (
            not isinstance(budget, int) or isinstance(budget, bool) or budget < 1
        ):
            bad(f"{key}.max_rollouts_per_day", "must be a whole number >= 1")
        minutes = entry.get("max_env_minutes_per_day")
        if minutes is not None and (
            not isinstance(minutes, int | float)
            or isinstance(minutes, bool)
            or not math.isfinite(minutes)
            or minutes <= 0
        ):
            bad(f"{key}.max_env_minutes_per_day", "must be a number of minutes > 0")
            minutes = None
        emulate = entry.get("emulate", False)
        if not isinstance(emulate, bool):
            bad(f"{key}.emulate", "must be true or false")
        elif emulate and kind and kind not in EMULATIONS:
            bad(f"{key}.emulate", f"a {kind} substrate has no emulation")
        elif emulate:
            for pname in connection_params(params):
                bad(
                    f"{key}.params.{pname}",
                    "where and as whom to connect is the emulation's when emulate = true "
                    "(remove it, or drop emulate to probe the real service)",
                )
        substrates[name] = SubstrateConfig(
            name,
            str(kind),
            dict(params),
            bool(optional),
            budget if isinstance(budget, int) else None,
            float(minutes) if minutes is not None else None,
            emulate is True,
            price_tables.parse_limits(entry.get("limits"), f"{key}.limits", bad),
            price_tables.parse_prices(entry.get("prices"), f"{key}.prices", bad),
            pool_settings(entry["pool"], f"{key}.pool", bad) if "pool" in entry else None,
        )

    plans: list[Plan] = []
    plan_entries = raw.get("plans", [])
    if not isinstance(plan_entries, list):
        bad("plans", "must be an array of tables ([[plans]])")
        plan_entries = []
    names: set[str] = set()
    for i, entry in enumerate(plan_entries):
        key = f"plans[{i}]"
        if not isinstance(entry, dict):
            bad(key, "must be a table")
            continue
        name = entry.get("name", f"plan{i}")
        if not isinstance(name, str) or not name:
            bad(f"{key}.name", "must be a non-empty string")
            name = f"plan{i}"
        key = f"plans.{name}"
        if name in names:
            bad(key, "defined twice")
        names.add(name)
        for extra in set(entry) - {
            "name",
            "substrates",
            "tier",
            "steps",
            "repeat",
            "interval",
            "jitter",
            "mode",
            "vantages",
        }:
            bad(f"{key}.{extra}", "unknown key")
        subs = entry.get("substrates")
        if isinstance(subs, str):
            subs = [subs]
        if not isinstance(subs, list) or not subs or not all(isinstance(s, str) for s in subs):
            bad(f"{key}.substrates", "must be a non-empty list of substrate names")
            subs = []
        for s in subs:
            if s not in substrates:
                bad(f"{key}.substrates", f"unknown substrate {s!r} (define it in [[substrates]])")
        tier = entry.get("tier")
        steps = entry.get("steps", 0)
        if not isinstance(steps, int) or isinstance(steps, bool):
            bad(f"{key}.steps", "must be a whole number")
            steps = 0
        try:
            workloads.validate(str(tier), steps)
        except workloads.WorkloadError as exc:
            bad(f"{key}.tier" if tier not in workloads.TIERS else f"{key}.steps", str(exc))
        repeat = entry.get("repeat", 1)
        if not isinstance(repeat, int) or isinstance(repeat, bool) or repeat < 1:
            bad(f"{key}.repeat", "must be a whole number >= 1")
            repeat = 1
        try:
            interval = duration(entry.get("interval", "10m"))
            if interval <= 0:
                raise ValueError("must be positive")
        except ValueError as exc:
            bad(f"{key}.interval", str(exc))
            interval = 600.0
        try:
            jitter = duration(entry.get("jitter", 0))
            if jitter < 0 or jitter >= interval:
                raise ValueError("must be >= 0 and shorter than the interval")
        except ValueError as exc:
            bad(f"{key}.jitter", str(exc))
            jitter = 0.0
        mode = entry.get("mode")
        if mode is not None and mode not in ("exec", "session"):
            bad(f"{key}.mode", "must be exec or session")
        elif mode is not None:
            for s_name in subs:
                conf = substrates.get(s_name)
                takes = _parameters(conf.kind) if conf and conf.kind in REGISTRY else None
                if takes is not None and "mode" not in takes:
                    bad(f"{key}.mode", f"substrate {s_name!r} ({conf.kind}) has no action modes")
        vantages = None
        if "vantages" in entry:
            vantages = engine_settings.vantage_list(entry["vantages"], f"{key}.vantages", bad)
        plans.append(
            Plan(str(name), tuple(subs), str(tier), steps, repeat, interval, jitter, mode, vantages)
        )

    retention_raw = raw.get("retention", {})
    if not isinstance(retention_raw, dict):
        bad("retention", "must be a table")
        retention_raw = {}
    for extra in set(retention_raw) - {"raw_days", "bucket"}:
        bad(f"retention.{extra}", "unknown key")
    raw_days = retention_raw.get("raw_days", 30)
    if (
        isinstance(raw_days, bool)
        or not isinstance(raw_days, (int, float))
        or not math.isfinite(raw_days)
        or raw_days <= 0
    ):
        bad("retention.raw_days", "must be a positive number of days")
        raw_days = 30
    bucket = retention_raw.get("bucket", "hour")
    if bucket not in ("hour", "day"):
        bad("retention.bucket", 'must be "hour" or "day"')
        bucket = "hour"

    sched = raw.get("scheduler", {})
    if not isinstance(sched, dict):
        bad("scheduler", "must be a table")
        sched = {}
    for extra in set(sched) - {"concurrency", "deadline", "misfire_grace", "reap_interval"}:
        bad(f"scheduler.{extra}", "unknown key")
    concurrency = sched.get("concurrency", 1)
    if not isinstance(concurrency, int) or isinstance(concurrency, bool) or concurrency < 1:
        bad("scheduler.concurrency", "must be a whole number >= 1")
        concurrency = 1
    seconds = {}
    for key, default in (("deadline", "15m"), ("misfire_grace", "5m"), ("reap_interval", "5m")):
        try:
            seconds[key] = duration(sched.get(key, default))
            if seconds[key] < 1:
                raise ValueError("must be at least 1 s")
        except ValueError as exc:
            bad(f"scheduler.{key}", str(exc))
            seconds[key] = duration(default)
    metrics = _metrics(raw.get("metrics", {}), bad)

    dashboard = parse_dashboard(raw.get("dashboard", {}), bad)
    detection = alert_tables.parse_detection(raw.get("detection", {}), bad)
    alerts = alert_tables.parse_alerts(raw.get("alerts", {}), bad, set(substrates))
    status = alert_tables.parse_status(raw.get("status", {}), bad, set(substrates))

    def has_modes(name: str) -> bool | None:
        kind = substrates[name].kind if name in substrates else NAMED.get(name, (None,))[0]
        takes = _parameters(kind) if kind in REGISTRY else None
        return None if takes is None else "mode" in takes

    loads = loadplan.parse_loads(
        raw.get("loads", []), bad, duration, set(substrates) | set(NAMED), has_modes
    )
    capacity = loadplan.parse_capacity(raw.get("capacity", {}), bad, duration)
    engine = engine_settings.parse(raw.get("engine"), bad)
    engine_settings.check_plans(engine, plans, substrates.values(), bad)
    if problems:
        raise ConfigError(problems)
    return Config(
        path,
        db_path,
        substrates,
        tuple(plans),
        Retention(float(raw_days), bucket),
        concurrency,
        seconds["deadline"],
        seconds["misfire_grace"],
        seconds["reap_interval"],
        dashboard,
        metrics,
        detection,
        alerts,
        status,
        loads,
        capacity,
        engine,
    )


def pool_settings(table: Any, key: str, bad: Any) -> PoolSettings | None:
    """A ``pool`` table (``{size = 4, refill_concurrency = 2, max_idle = "10m"}``), each
    mistake reported through `bad` under `key`; None when it is unusable."""
    if not isinstance(table, dict):
        bad(key, "must be a table: pool = {size = 4, refill_concurrency = 2}")
        return None
    for extra in sorted(set(table) - set(_POOL_KEYS)):
        bad(f"{key}.{extra}", f"unknown key (known: {', '.join(_POOL_KEYS)})")
    if "size" not in table:
        bad(f"{key}.size", "missing (how many environments to keep ready, >= 1)")
        return None
    values: dict[str, Any] = {"size": table["size"]}
    values["refill_concurrency"] = table.get("refill_concurrency", 1)
    try:
        values["max_idle_s"] = duration(table.get("max_idle", "10m"))
        if values["max_idle_s"] < 1:
            raise ValueError("must be at least 1 s")
    except ValueError as exc:
        bad(f"{key}.max_idle", str(exc))
        return None
    try:
        return PoolSettings(**values)
    except ValueError as exc:
        name = str(exc).split(" ", 1)[0]
        bad(f"{key}.{'max_idle' if name == 'max_idle' else name}", str(exc))
        return None


def _metrics(table: Any, bad: Any) -> MetricsSettings:
    """The ``[metrics]`` table, each mistake reported through `bad`."""
    default = MetricsSettings()
    if not isinstance(table, dict):
        bad("metrics", "must be a table")
        return default
    for extra in set(table) - {"enabled", "address", "port"}:
        bad(f"metrics.{extra}", "unknown key")
    enabled, address = table.get("enabled", default.enabled), table.get("address", default.address)
    port = table.get("port", default.port)
    if not isinstance(enabled, bool):
        bad("metrics.enabled", "must be true or false")
    if not isinstance(address, str) or not address:
        bad("metrics.address", 'must be an address to listen on (e.g. "127.0.0.1")')
    if not isinstance(port, int) or isinstance(port, bool) or not 0 <= port <= 65535:
        bad("metrics.port", "must be a port number, 0-65535 (0: any free port)")
    return MetricsSettings(enabled is True, str(address), port if isinstance(port, int) else 0)
