"""The composition root: a substrate name becomes a ready substrate, T2's source and a store.

Why one place (Locust's `Environment` habit; docs/cli.md, docs/configuration.md#scheduler):
`rtax probe`, `rtax reap`, `rtax emulate` and the scheduler all turn configuration into running
parts the same way. A name is a configuration entry or a built-in, perhaps pointed at an
emulation; the substrate is built from it and prepared; T2 clones from rtax's own git server,
listening where the substrate's environments reach this host; records go to one database. Wiring it
once means a new part (a warm pool, a fan-out) is wired once.

"""

from __future__ import annotations

import contextlib
import threading
import tomllib
import weakref
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

from rtax import emulation
from rtax.assets import attrs
from rtax.assets.attrs import Fixture, GitServer
from rtax.core import paths
from rtax.core.failures import HarnessError, SubstrateError
from rtax.core.options import RolloutOptions
from rtax.core.provenance import origin
from rtax.core.workloads import RepoSource
from rtax.settings import Config, ConfigError, SubstrateConfig
from rtax.settings import config as configuration
from rtax.store.database import Store
from rtax.substrates import NAMED, UnknownSubstrate, build_substrate, names
from rtax.substrates.base import Substrate, require_host_address
from rtax.substrates.pool import WarmPool
from rtax.substrates.restore import Restorer

Log = Callable[[str], None]
#: Builds a substrate from its configuration entry and overrides (injectable: tests hand in
#: their own).
Factory = Callable[[SubstrateConfig, dict[str, Any]], Substrate]

#: Which emulations a composition's names may point at: those a live ``rtax emulate`` serves
#: (borrowed: the CLI), those this composition starts itself for ``emulate = true`` entries
#: (owned: the scheduler, whose schedule must not depend on another process), or none (the
#: real services: `rtax reap`).
EMULATIONS = ("running", "owned", "off")


class ComposeError(ValueError):
    """What was asked for can't be put together here (an unknown or unusable name, an option
    that doesn't fit it); the message is one line for the user."""


# -- the database and the fixture -------------------------------------------------------------


def check_database(db: Path | None) -> None:
    """Refuse an unusable database path before any slow work (fixture or image builds)."""
    if db is None:
        return
    if db.is_dir():
        raise ComposeError(f"--db {db} is a folder, not a database file")
    if not db.parent.is_dir():
        raise ComposeError(f"--db {db}: folder {db.parent} does not exist")


def open_store(db: Path | None, *, create: bool = True) -> Store:
    """The database at `db`, else the default one (whose folder is made when missing)."""
    path = db if db is not None else paths.default_db()
    if db is None:
        path.parent.mkdir(parents=True, exist_ok=True)
    return Store(path, create=create)  # it refuses a folder or a missing parent in one line


def ensure_fixture(log: Log | None = None) -> Fixture:
    """The built attrs fixture, building it once if missing
    (docs/workloads.md#the-attrs-fixture)."""
    fixture = attrs.load()
    if fixture is None:
        if log is not None:
            log("building the attrs fixture (once; see `rtax fixtures`)...")
        fixture = attrs.build()
    return fixture


# -- names ------------------------------------------------------------------------------------


def configured_entry(name: str, config_path: Path | None) -> SubstrateConfig | None:
    """The configuration's entry for `name`, or None. The file is only validated (which
    imports every kind it names) when it mentions `name`, so probing a built-in stays fast."""
    path = configuration.find(config_path)
    try:
        raw = tomllib.loads(path.read_text())
    except OSError:
        if config_path is not None:
            raise ComposeError(f"--config {config_path}: cannot read it") from None
        return None
    except tomllib.TOMLDecodeError:
        if config_path is None:
            return None  # a broken implicit file: built-ins still work; `config check` says why
        return configuration.load(path).substrates[name]  # raises ConfigError, one line each
    entries = raw.get("substrates") if isinstance(raw.get("substrates"), list) else []
    if not any(isinstance(e, dict) and e.get("name") == name for e in entries):
        return None
    return configuration.load(path).substrates[name]


class Composition:
    """The wiring of one command or one scheduler: which names exist, which emulations serve
    them, the fixture, the git servers and the database, ended together by `close` (or as a
    context manager).

    `config`: a loaded configuration (the scheduler); without one, names are looked up in the
    file at `config_path` only when asked for (the CLI). `emulations`: see `EMULATIONS`.
    `deadline_s`: a rollout's deadline (default: the configuration's, else the probe
    runner's), which a warm pool's environments must outlive (`for_rollouts`)."""

    def __init__(
        self,
        config: Config | None = None,
        *,
        config_path: Path | None = None,
        database: Path | None = None,
        emulations: str = "running",
        factory: Factory = build_substrate,
        fixture: Fixture | None = None,
        log: Log | None = None,
        deadline_s: float | None = None,
    ) -> None:
        if emulations not in EMULATIONS:
            raise ValueError(f"emulations must be one of {EMULATIONS}, not {emulations!r}")
        self.config = config
        self.config_path = config_path
        if database is None and config is not None:
            database = config.database
        elif database is None and config_path is not None:  # --config without --db
            database = configuration.database_of(config_path)
        self.database = database
        self.emulations = emulations
        self.factory = factory
        self._fixture = fixture
        self.log = log
        #: kind -> substrate parameters of the emulations serving it (owned: filled by
        #: `start_emulations`; running: read when first asked for)
        self._served: dict[str, dict[str, Any]] | None = {} if emulations != "running" else None
        #: the emulations this composition started, stopped by `close`
        self.started: list[Any] = []
        #: host address -> git server (one per address the substrates reach)
        self.servers: dict[str, GitServer] = {}
        self._servers_lock = threading.Lock()
        #: the substrates `build` made and someone still holds, closed by `close` (held weakly:
        #: a scheduler builds one per rollout)
        self._built: list[weakref.ref[Substrate]] = []
        if deadline_s is None:
            deadline_s = config.deadline_s if config is not None else RolloutOptions().deadline_s
        #: the probe options of this composition's rollouts (a warm pool makes environments
        #: with their timeouts, for their lifetime)
        self.probe_options = RolloutOptions(deadline_s=deadline_s)
        #: (name, overrides) -> the warm pool rollouts of that entry claim from, kept until
        #: `close` (docs/configuration.md#warm-pools)
        self.pools: dict[tuple[str, tuple[tuple[str, Any], ...]], WarmPool | Restorer] = {}
        self._pools_lock = threading.Lock()

    # -- names -> substrates -----------------------------------------------------------------

    def entry(self, name: str) -> SubstrateConfig:
        """The configuration entry `name` stands for: the configured one (parameters, ``*_env``
        credentials), else the built-in; pointed at its emulation when one serves it (its
        samples then labelled ``emulated``, docs/emulations.md)."""
        if self.config is not None:
            conf = self.config.substrates.get(name)
        else:
            conf = configured_entry(name, self.config_path)
        if conf is None and name not in NAMED:
            raise UnknownSubstrate(
                f"unknown substrate {name!r} (built in: {', '.join(names())}; or define it in "
                "rtax.toml)"
            )
        if conf is None:
            kind, builtin = NAMED[name]
            conf = SubstrateConfig(name, kind, dict(builtin))
        served = self._serving(conf.kind)
        if conf.emulate and served is None:
            raise ComposeError(
                f"substrate {name} probes the {conf.kind} emulation (emulate = true): start it "
                f"with `rtax emulate {conf.kind}`"
            )
        # A borrowed `rtax emulate` stands in for the built-in cloud names too; the scheduler's
        # own emulations serve only the entries that ask for them.
        borrowed = self.emulations == "running" and name in NAMED
        if served is not None and (conf.emulate or borrowed):
            conf = replace(conf, params=emulation.overlay(served, conf.params))
            if self.emulations == "running" and self.log is not None:
                self.log(
                    f"{name}: probing the {conf.kind} emulation of `rtax emulate` "
                    "(fidelity emulated)"
                )
        return conf

    def _serving(self, kind: str) -> dict[str, Any] | None:
        if kind not in emulation.kinds():
            return None
        if self._served is None:
            self._served = emulation.running()
        return self._served.get(kind)

    def build(self, conf: SubstrateConfig, overrides: dict[str, Any] | None = None) -> Substrate:
        """The substrate of an entry (see `entry`), its errors as they come (the scheduler
        records them as the rollout's failure)."""
        substrate = self.factory(conf, overrides or {})
        with contextlib.suppress(TypeError):  # a test's stand-in may not take a weak reference
            self._built = [r for r in self._built if r() is not None] + [weakref.ref(substrate)]
        return substrate

    def for_rollouts(
        self, conf: SubstrateConfig, overrides: dict[str, Any] | None = None
    ) -> Substrate:
        """What the rollouts of `conf` run on: its warm pool when the entry has one (made on
        first use, one per entry and overrides, filled by `prepare`, closed by `close`), else
        a new substrate (`build`). Only rollouts claim: the reaper and `prepare`-only checks
        use `build`, so a pool is never closed by someone who merely listed leftovers."""
        if conf.pool is None and conf.launch != "restore":
            return self.build(conf, overrides)
        key = (conf.name, tuple(sorted((overrides or {}).items())))
        opt = self.probe_options
        with self._pools_lock:
            pool = self.pools.get(key)
            if pool is None and conf.launch == "restore":
                pool = Restorer(
                    self.factory(conf, overrides or {}),
                    running_timeout_s=opt.running_timeout_s,
                    ready_timeout_s=opt.ready_timeout_s,
                    ready_interval_s=opt.ready_interval_s,
                    cleanup_timeout_s=opt.cleanup_timeout_s,
                    on_snapshot=self.record_snapshot,
                )
                self.pools[key] = pool
            elif pool is None:
                assert conf.pool is not None
                pool = WarmPool(
                    self.factory(conf, overrides or {}),
                    conf.pool,
                    rollout_lifetime_s=opt.deadline_s + opt.cleanup_timeout_s,
                    running_timeout_s=opt.running_timeout_s,
                    ready_timeout_s=opt.ready_timeout_s,
                    ready_interval_s=opt.ready_interval_s,
                    cleanup_timeout_s=opt.cleanup_timeout_s,
                    paused=conf.launch == "resume",
                )
                self.pools[key] = pool
        return pool

    def record_snapshot(self, row: dict[str, Any]) -> None:
        """Keep a snapshot the restore path made (its time and size are measurements)."""
        store = self.store()
        try:
            store.snapshots.add({**row, **origin()})
        finally:
            store.close()

    def substrate(self, name: str, *, pooled: bool = False, **overrides: Any) -> Substrate:
        """The substrate called `name` (overrides of None are dropped); with `pooled`, what
        its rollouts run on (`for_rollouts`: its warm pool, if it has one). Every way it can't
        be built becomes one `ComposeError` line."""
        params = {k: v for k, v in overrides.items() if v is not None}
        conf = self.entry(name)
        try:
            return self.for_rollouts(conf, params) if pooled else self.build(conf, params)
        except TypeError as exc:
            raise ComposeError(
                f"substrate {name} does not take {', '.join(params)}: {exc}"
            ) from None
        except Exception as exc:  # e.g. docker.errors.DockerException: no engine
            raise ComposeError(f"cannot use substrate {name}: {exc}") from None

    def ready(self, substrate: Substrate, log: Log, *, t2: bool = False) -> None:
        """`prepare` the substrate (and, for T2, check that it knows where its environments
        reach this host); a substrate that can't be prepared is one line."""
        try:
            substrate.prepare(log)
            if t2:
                require_host_address(substrate)
        except SubstrateError as exc:
            raise ComposeError(f"substrate {substrate.name} is not usable: {exc}") from exc

    def reap_targets(self, asked: list[str] | None, note: Log) -> list[Substrate]:
        """The substrates whose leftovers `rtax reap` visits: those `asked` for (each must
        build), else every built-in name and every configured one that isn't an emulation's,
        skipping with a `note` each those that can't be built here
        (docs/substrates/docker.md#reaper)."""
        wanted = asked
        if not wanted:
            try:
                configured = configuration.load(self.config_path).substrates
            except (ConfigError, OSError) as exc:
                if self.config_path is not None:
                    raise
                note(f"configuration not used: {exc}")
                configured = {}
            wanted = sorted(set(names()) | {n for n, c in configured.items() if not c.emulate})
        found = []
        for name in wanted:
            try:
                found.append(self.substrate(name))
            except ComposeError as exc:
                if asked:
                    raise
                note(f"skipping {name}: {exc}")
        return found

    # -- emulations the composition owns ----------------------------------------------------

    def start_emulations(self, log: Log) -> dict[str, str]:
        """Start the emulation of every kind an ``emulate = true`` entry names, for this
        composition's life; return the entries that can't run (name -> why). An emulation
        that can't start disables its entries if they are all optional (a failing probe never
        takes a monitor down), else the error is raised."""
        assert self.config is not None and self.emulations == "owned"
        entries = self.config.substrates.values()
        unusable: dict[str, str] = {}
        for kind in sorted({c.kind for c in entries if c.emulate}):
            users = [c for c in entries if c.emulate and c.kind == kind]
            try:
                started = emulation.start_all([kind], log=log)
            except Exception as exc:
                if not all(c.optional for c in users):
                    raise
                unusable.update(
                    {c.name: f"its {kind} emulation could not start: {exc}" for c in users}
                )
                continue
            self.started.extend(started)
            assert self._served is not None
            self._served[kind] = started[0].substrate_params()
        return unusable

    # -- T2's source ---------------------------------------------------------------------------

    def fixture(self) -> Fixture:
        """The attrs fixture (built on first use)."""
        if self._fixture is None:
            self._fixture = ensure_fixture(self.log)
        return self._fixture

    def git_url(self, substrate: Substrate) -> str:
        """The fixture's repository over git://, from rtax's own git server on the address
        where `substrate`'s environments reach this host: one server per address, started on
        first use and stopped by `close`. A server that can't start is rtax's failure, not the
        substrate's (`HarnessError`)."""
        host = require_host_address(substrate)
        with self._servers_lock:
            server = self.servers.get(host)
            if server is None:
                try:
                    server = GitServer(self.fixture().root, host=host).start()
                except Exception as exc:
                    raise HarnessError(f"git daemon on {host}: {exc}") from exc
                self.servers[host] = server
        return server.url(self.fixture().bare_repo.name)

    def source(
        self,
        substrate: Substrate,
        *,
        repo_url: str = "serve",
        commit: str | None = None,
        fix_patch: str | None = None,
        failing_test: str | None = None,
    ) -> RepoSource:
        """T2's repository: the fixture served over git:// (``serve``), the fixture by path
        (``path``, for substrates that see this host's files) or any git URL; the commit, fix
        and failing test default to the fixture's. A restore path whose snapshot sources have
        no network clones the fixture from a copy made inside them (`Restorer.seed`)."""
        fixture = self.fixture()
        seeded = (
            substrate.seed(fixture.bare_repo)
            if repo_url in ("serve", "path") and isinstance(substrate, Restorer)
            else None
        )
        if seeded is not None:  # snapshot sources without a network clone a copy
            url = f"file://{seeded}"
        elif repo_url == "serve":
            url = self.git_url(substrate)
        else:
            url = str(fixture.bare_repo) if repo_url == "path" else repo_url
        return RepoSource(
            url,
            commit or fixture.buggy_commit,
            fix_patch if fix_patch is not None else fixture.fix_patch,
            failing_test or fixture.failing_test,
        )

    # -- the store and the end -----------------------------------------------------------------

    def store(self, *, create: bool = True) -> Store:
        """A new connection to this composition's database (one per thread or use)."""
        return open_store(self.database, create=create)

    def close(self) -> None:
        """Close its warm pools (every environment they hold is destroyed) and the substrates
        it built that are still held (their clients and connections, e.g. Daytona's event
        stream, go before the emulations they talk to), stop the git servers, then the
        emulations this composition started (the last started first); idempotent."""
        with self._pools_lock:
            pools, self.pools = list(self.pools.values()), {}
        for pool in pools:
            with contextlib.suppress(Exception):  # each logs what it could not destroy
                pool.close()
        built, self._built = self._built, []
        for ref in built:
            substrate = ref()
            if substrate is not None:
                with contextlib.suppress(Exception):  # releasing, not measuring
                    substrate.close()
        with self._servers_lock:
            servers, self.servers = list(self.servers.values()), {}
        for server in servers:
            server.stop()
        started, self.started = self.started, []
        if started:
            emulation.stop_all(started)  # RuntimeError naming what could not stop

    def __enter__(self) -> Composition:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def serve_emulations(kinds: list[str], log: Log, until: Callable[[], object]) -> None:
    """``rtax emulate``: serve the emulations of `kinds` and publish where, so that names of
    those kinds probe them (docs/emulations.md), until `until` returns or raises (Ctrl-C).

    One per data folder: the publisher's lock is taken before anything starts; it is released
    first on the way out, so that no new probe picks up what is about to go."""
    publisher = emulation.Publisher()
    try:
        publisher.acquire()
    except emulation.EmulationsBusy as exc:
        raise ComposeError(str(exc)) from None
    started: list[Any] = []
    try:
        try:
            started = emulation.start_all(kinds, log=log)
        except Exception as exc:  # e.g. no Docker engine for the environments
            raise ComposeError(
                f"cannot start the emulations: {type(exc).__name__}: {exc}"
            ) from None
        path = publisher.publish({e.kind: e.substrate_params() for e in started})
        log(f"published in {path}; every sample taken through these is labelled emulated")
        for emu in started:
            log(f"  rtax probe --substrate {emu.kind} --tier T2 --repeat 3")
        log("Ctrl-C stops the emulations and removes their containers")
        until()
    finally:
        publisher.release()
        try:
            emulation.stop_all(started)
        except RuntimeError as exc:  # reported, and the interrupt still ends the command
            log(f"rtax emulate: {exc}")
