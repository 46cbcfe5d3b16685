"""The `rtax` command line: thin wrappers that map flags onto library calls.

Why thin (README.md#cli): every command opens the database, calls one library function and turns
library errors into one line on stderr with exit code 2, so that scripts and the scheduler can
rely on the library alone and the CLI adds no behaviour of its own.
"""

from __future__ import annotations

import argparse
import math
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path
from typing import NoReturn

from rtax import __version__, fixtures, paths, reaper, stats, toolchain, workloads
from rtax.config import ConfigError, SubstrateConfig, build_substrate
from rtax.fixtures import Fixture, FixtureError, GitServer
from rtax.image import ImageError
from rtax.probe import ProbeOptions, RolloutRecord, run_rollout
from rtax.store import Store, StoreError
from rtax.substrates import UnknownSubstrate
from rtax.substrates import names as builtin_names
from rtax.substrates.base import Substrate, SubstrateError, require_host_address
from rtax.toolchain import ToolchainError
from rtax.workloads import RepoSource, WorkloadError

EXIT_USAGE = 2
EXIT_INTERRUPTED = 130
EXIT_TERMINATED = 143
MAX_SEED = 2**63 - 1


class UsageError(Exception):
    """Bad input from the user: one line on stderr, exit code 2."""


class _Parser(argparse.ArgumentParser):
    """argparse, but an error is one line (no usage dump), still exit code 2."""

    def error(self, message: str) -> NoReturn:
        self.exit(EXIT_USAGE, f"{self.prog}: error: {message}\n")


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def _non_negative_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be 0 or more, got {value}")
    return value


def _seed(text: str) -> int:
    value = _non_negative_int(text)
    if value > MAX_SEED:
        raise argparse.ArgumentTypeError(f"must be at most {MAX_SEED}, got {text}")
    return value


def _port(text: str) -> int:
    value = _non_negative_int(text)
    if value > 65535:
        raise argparse.ArgumentTypeError(f"must be 0..65535, got {text}")
    return value


def _positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not value > 0 or math.isinf(value):
        raise argparse.ArgumentTypeError(f"must be a positive number, got {text}")
    return value


def _non_negative_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not value >= 0 or math.isinf(value):
        raise argparse.ArgumentTypeError(f"must be 0 or more, got {text}")
    return value


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="rtax", description="Measure the rollout infrastructure tax.")
    parser.add_argument("--version", action="version", version=f"rtax {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)

    probe = sub.add_parser("probe", help="run rollouts on a substrate and store every sample")
    probe.add_argument(
        "--substrate",
        default="local",
        help=f"substrate name: one defined in the configuration, or built in "
        f"({', '.join(builtin_names())}); default local",
    )
    probe.add_argument(
        "--config",
        type=Path,
        default=None,
        help="configuration file defining substrate names (default: $RTAX_CONFIG, "
        "./rtax.toml, the checkout's rtax.toml)",
    )
    probe.add_argument("--tier", choices=workloads.TIERS, default="T0")
    probe.add_argument(
        "--steps",
        type=_non_negative_int,
        default=0,
        help="trajectory length on the T2 setup (10/50/150 are standard; 0: the "
        "tier's fixed script)",
    )
    probe.add_argument("--repeat", type=_positive_int, default=1, help="rollouts to run")
    probe.add_argument(
        "--seed",
        type=_seed,
        default=0,
        help="trajectory seed: the same seed gives the same actions everywhere",
    )
    probe.add_argument("--db", type=Path, default=None, help="database (default data/rtax.db)")
    probe.add_argument(
        "--deadline",
        type=_positive_float,
        default=3600.0,
        help="wall-time limit of one rollout, seconds",
    )
    probe.add_argument(
        "--action-timeout",
        type=_positive_float,
        default=None,
        help="override every command's timeout, seconds",
    )
    probe.add_argument(
        "--repo-url",
        default="serve",
        help="where T2 clones from: 'serve' (the fixture over git:// on a local "
        "port, default), 'path' (the fixture by path), or any git URL",
    )
    probe.add_argument("--commit", default=None, help="T2 commit (default: the fixture's buggy)")
    probe.add_argument(
        "--fix-patch", type=Path, default=None, help="T2 fix patch file (default: the fixture's)"
    )
    probe.add_argument(
        "--failing-test",
        default=None,
        help="T2 test id that the patch fixes (default: the fixture's)",
    )
    probe.add_argument(
        "--mode",
        choices=("exec", "session"),
        default=None,
        help="action mode of container substrates: one exec per action, or one persistent "
        "shell per environment (default exec)",
    )
    probe.add_argument("--quiet", action="store_true", help="no progress bar or summary")

    export = sub.add_parser("export", help="write runs or actions to a CSV file")
    export.add_argument("--db", type=Path, default=None, help="database (default data/rtax.db)")
    export.add_argument("--table", choices=("runs", "actions"), required=True)
    export.add_argument("--out", type=Path, required=True, help="CSV file to write")
    export.add_argument("--substrate", default=None, help="only this substrate")
    export.add_argument("--tier", choices=workloads.TIERS, default=None, help="only this tier")

    image = sub.add_parser("image", help="the Docker runner image")
    image_sub = image.add_subparsers(dest="image_command", required=True, parser_class=_Parser)
    build = image_sub.add_parser("build", help="build the runner image (a no-op if current)")
    build.add_argument(
        "--base",
        default=None,
        help="base image (default: a Debian bookworm rootfs made with mmdebstrap; "
        "e.g. python:3.11-slim where a registry is reachable)",
    )
    build.add_argument("--force", action="store_true", help="rebuild even if current")

    reap = sub.add_parser("reap", help="remove leftover environments that no live run owns")
    reap.add_argument(
        "--substrate",
        action="append",
        default=None,
        help="substrate to reap (repeatable; default: every built-in one that can be reached "
        "from here, skipping the others with a line each)",
    )
    reap.add_argument(
        "--older-than",
        type=_non_negative_float,
        default=None,
        metavar="MIN",
        help="only leftovers older than MIN minutes (also reaps those whose owner can't be "
        "checked from this host)",
    )
    reap.add_argument("--dry-run", action="store_true", help="list, remove nothing")
    reap.add_argument(
        "--config", type=Path, default=None, help="configuration whose substrates to visit too"
    )

    sched = sub.add_parser("schedule", help="run the configured probe plans until stopped")
    sched.add_argument(
        "--config",
        type=Path,
        default=None,
        help="configuration file (default: $RTAX_CONFIG, ./rtax.toml, the checkout's rtax.toml)",
    )
    conf = sub.add_parser("config", help="the configuration file")
    conf_sub = conf.add_subparsers(dest="config_command", required=True, parser_class=_Parser)
    check = conf_sub.add_parser("check", help="validate it: one line per mistake, exit 2")
    check.add_argument("--config", type=Path, default=None, help="configuration file")

    health = sub.add_parser(
        "health",
        help="exit 0 if the dashboard answers and a scheduler "
        "holds the database (the app image's healthcheck)",
    )
    health.add_argument("--url", default="http://127.0.0.1:8501/_stcore/health")
    health.add_argument("--config", type=Path, default=None, help="configuration file")

    from rtax.emulation import kinds as emulation_kinds

    emulate = sub.add_parser(
        "emulate",
        help="serve local emulations of the cloud substrates until stopped (their samples are "
        "labelled emulated)",
    )
    emulate.add_argument(
        "kinds",
        nargs="*",
        choices=emulation_kinds(),
        metavar="KIND",
        help=f"which to serve: {', '.join(emulation_kinds())} (default: all)",
    )

    fix = sub.add_parser(
        "fixtures",
        help="build the offline attrs fixture and the local workload toolchain (no-ops if built)",
    )
    fix.add_argument("--force", action="store_true", help="rebuild even if up to date")
    fix.add_argument(
        "--serve", action="store_true", help="then serve it over git:// until interrupted"
    )
    fix.add_argument("--host", default="127.0.0.1", help="address to serve on")
    fix.add_argument("--port", type=_port, default=9418, help="port to serve on")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    handler = {
        "probe": cmd_probe,
        "export": cmd_export,
        "fixtures": cmd_fixtures,
        "image": cmd_image,
        "reap": cmd_reap,
        "schedule": cmd_schedule,
        "config": cmd_config,
        "health": cmd_health,
        "emulate": cmd_emulate,
    }[args.command]
    previous = signal.signal(signal.SIGTERM, _terminate)
    try:
        return handler(args)
    except Terminated:
        print(f"rtax {args.command}: terminated; cleaned up", file=sys.stderr)
        return EXIT_TERMINATED
    except KeyboardInterrupt:
        print(f"rtax {args.command}: interrupted; cleaned up", file=sys.stderr)
        return EXIT_INTERRUPTED
    except ConfigError as exc:  # every mistake, one line each
        for problem in exc.problems:
            print(f"rtax {args.command}: error: {problem}", file=sys.stderr)
        return EXIT_USAGE
    except (
        UsageError,
        StoreError,
        FixtureError,
        WorkloadError,
        UnknownSubstrate,
        ImageError,
        ToolchainError,
    ) as exc:
        print(f"rtax {args.command}: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    finally:
        signal.signal(signal.SIGTERM, previous)


class Terminated(KeyboardInterrupt):
    """SIGTERM, turned into the same path as Ctrl-C: clean up, record nothing half-done."""


def _terminate(signum: int, frame: object) -> None:
    raise Terminated


def _check_db_path(db: Path | None) -> None:
    """Refuse an unusable --db before any slow work (fixture or image builds)."""
    if db is None:
        return
    if db.is_dir():
        raise UsageError(f"--db {db} is a folder, not a database file")
    if not db.parent.is_dir():
        raise UsageError(f"--db {db}: folder {db.parent} does not exist")


def _open_store(db: Path | None, *, create: bool) -> Store:
    path = db if db is not None else paths.default_db()
    if db is None:
        path.parent.mkdir(parents=True, exist_ok=True)
    return Store(path, create=create)  # it refuses a folder or a missing parent in one line


def _ensure_fixture(quiet: bool) -> Fixture:
    fixture = fixtures.load()
    if fixture is None:
        if not quiet:
            print("building the attrs fixture (once; see `rtax fixtures`)...", file=sys.stderr)
        fixture = fixtures.build()
    return fixture


@contextmanager
def _repo_source(
    args: argparse.Namespace, fixture: Fixture, host: str
) -> Iterator[RepoSource | None]:
    """The T2 repository source, serving the fixture over git:// for the run when asked."""
    if args.tier != "T2":
        yield None
        return
    patch = fixture.fix_patch
    if args.fix_patch is not None:
        try:
            patch = args.fix_patch.read_text()
        except OSError as exc:
            raise UsageError(f"cannot read --fix-patch {args.fix_patch}: {exc.strerror}") from None
    commit = args.commit or fixture.buggy_commit
    failing = args.failing_test or fixture.failing_test
    if args.repo_url == "serve":
        with GitServer(fixture.root, host=host) as server:
            yield RepoSource(server.url(fixture.bare_repo.name), commit, patch, failing)
        return
    url = str(fixture.bare_repo) if args.repo_url == "path" else args.repo_url
    yield RepoSource(url, commit, patch, failing)


def cmd_probe(args: argparse.Namespace) -> int:
    workloads.validate(args.tier, args.steps)  # before any slow work
    _check_db_path(args.db)
    t2_only = [
        f"--{n.replace('_', '-')}"
        for n in ("commit", "fix_patch", "failing_test")
        if getattr(args, n) is not None
    ]
    if args.repo_url != "serve":
        t2_only.append("--repo-url")
    if t2_only and args.tier != "T2":
        raise UsageError(f"{', '.join(t2_only)} only apply to --tier T2")
    substrate = _substrate(
        args.substrate, log=_logger(args.quiet), config_path=args.config, mode=args.mode
    )
    if args.repo_url == "path" and substrate.kind != "local":
        raise UsageError(
            f"--repo-url path: a {substrate.kind} environment can't see this "
            "host's files; use 'serve' (the default) or a git URL"
        )
    fixture = _ensure_fixture(args.quiet)
    log = _logger(args.quiet)
    try:
        substrate.prepare(log)
        host = require_host_address(substrate) if args.tier == "T2" else "127.0.0.1"
    except SubstrateError as exc:
        raise UsageError(f"substrate {substrate.name} is not usable: {exc}") from exc
    store = _open_store(args.db, create=True)
    options = ProbeOptions(deadline_s=args.deadline)
    records: list[RolloutRecord] = []
    with store, _repo_source(args, fixture, host) as source:
        workload = workloads.build(args.tier, steps=args.steps, seed=args.seed, source=source)
        if args.action_timeout is not None:
            workload = _with_timeout(workload, args.action_timeout)
        bar = _progress(
            args.repeat,
            f"{substrate.name} {args.tier}" + (f" S={args.steps}" if args.steps else ""),
            args.quiet,
        )
        try:
            with bar:
                for _ in range(args.repeat):
                    record = run_rollout(substrate, workload, options=options)
                    store.save_rollout(record)
                    records.append(record)
                    failed = sum(not r.ok for r in records)
                    bar.set_postfix_str(f"last {record.run['wall_s']:.3f}s, failed {failed}")
                    bar.update(1)
        except KeyboardInterrupt as exc:
            print(
                f"\n{'terminated' if isinstance(exc, Terminated) else 'interrupted'}: "
                f"{len(records)} rollouts saved; the one in progress was cleaned up and not "
                "recorded",
                file=sys.stderr,
            )
            return EXIT_TERMINATED if isinstance(exc, Terminated) else EXIT_INTERRUPTED
    failed = sum(not r.ok for r in records)
    if not args.quiet:
        print(_summary(records, store.path))
    elif failed:
        print(
            f"rtax probe: {failed} of {len(records)} rollouts failed (kept, classified, in "
            f"{store.path})",
            file=sys.stderr,
        )
    return 0 if not failed else 1


def _configured(name: str, config_path: Path | None) -> SubstrateConfig | None:
    """The configuration's entry for `name`, or None. The file is only validated (which
    imports every kind it names) when it mentions `name`, so probing a built-in stays fast."""
    import tomllib

    from rtax import config

    path = config.find(config_path)
    try:
        raw = tomllib.loads(path.read_text())
    except OSError:
        if config_path is not None:
            raise UsageError(f"--config {config_path}: cannot read it") from None
        return None
    except tomllib.TOMLDecodeError:
        if config_path is None:
            return None  # a broken implicit file: built-ins still work; `config check` says why
        raise
    entries = raw.get("substrates") if isinstance(raw.get("substrates"), list) else []
    if not any(isinstance(e, dict) and e.get("name") == name for e in entries):
        return None
    return config.load(path).substrates[name]


def _substrate(
    name: str,
    log: Callable[[str], None] | None = None,
    *,
    use_emulation: bool = True,
    config_path: Path | None = None,
    **overrides: object,
) -> Substrate:
    """The substrate called `name`: the configuration's entry if it has one (parameters,
    ``*_env`` credentials), else the built-in; construction failures become one-line errors.
    While ``rtax emulate`` serves its kind (and `use_emulation`), a built-in cloud name or an
    ``emulate = true`` entry probes that emulation, its samples labelled ``emulated``."""
    from rtax import emulation
    from rtax.substrates import NAMED

    params = {k: v for k, v in overrides.items() if v is not None}
    conf = _configured(name, config_path)
    if conf is None and name not in NAMED:
        known = ", ".join(builtin_names())
        raise UnknownSubstrate(
            f"unknown substrate {name!r} (built in: {known}; or define it in rtax.toml)"
        )
    if conf is None:
        kind, builtin = NAMED[name]
        conf = SubstrateConfig(name, kind, dict(builtin))
    served = None
    if use_emulation and conf.kind in emulation.kinds():
        served = emulation.running().get(conf.kind)
    if conf.emulate and served is None:
        raise UsageError(
            f"substrate {name} probes the {conf.kind} emulation (emulate = true): start it "
            f"with `rtax emulate {conf.kind}`"
        )
    if served is not None and (conf.emulate or name in NAMED):
        conf = replace(conf, params=emulation.overlay(served, conf.params))
        if log is not None:
            log(f"{name}: probing the {conf.kind} emulation of `rtax emulate` (fidelity emulated)")
    try:
        return build_substrate(conf, params)
    except TypeError as exc:
        raise UsageError(f"substrate {name} does not take {', '.join(params)}: {exc}") from None
    except Exception as exc:  # e.g. docker.errors.DockerException: no engine
        raise UsageError(f"cannot use substrate {name}: {exc}") from None


def _logger(quiet: bool) -> Callable[[str], None]:
    def log(message: str) -> None:
        if not quiet:
            print(message, file=sys.stderr)

    return log


def _with_timeout(workload: workloads.Workload, timeout_s: float) -> workloads.Workload:
    return replace(
        workload,
        setup=tuple(replace(a, timeout_s=timeout_s) for a in workload.setup),
        actions=tuple(replace(a, timeout_s=timeout_s) for a in workload.actions),
    )


class _NoBar:
    def __enter__(self) -> _NoBar:
        return self

    def __exit__(self, *exc: object) -> None:
        pass

    def update(self, n: int) -> None:
        pass

    def set_postfix_str(self, text: str) -> None:
        pass


def _progress(total: int, desc: str, quiet: bool):  # type: ignore[no-untyped-def]
    if quiet:
        return _NoBar()
    from tqdm import tqdm

    return tqdm(
        total=total,
        desc=desc,
        unit="rollout",
        file=sys.stderr,
        leave=True,
        disable=None,
        dynamic_ncols=True,
    )


def _summary(records: list[RolloutRecord], db: Path) -> str:
    """The end-of-probe table: p50/p95/n/success per phase, in milliseconds."""
    import pandas as pd

    runs = pd.DataFrame([r.run for r in records])
    table = stats.phase_summary(runs)
    per_action = pd.DataFrame(
        [a for r in records if r.ok for a in r.actions if a["phase"] == "action"]
    )
    action_row = stats.summarize(per_action["latency_s"] if not per_action.empty else [], (50, 95))
    lines = [
        f"{len(records)} rollouts, {int(runs['status'].eq('ok').sum())} ok -> {db}",
        f"{'phase':<24}{'p50 ms':>11}{'p95 ms':>11}{'mean ms':>11}{'n':>6}{'success':>9}",
    ]

    def fmt(x: float) -> str:
        return f"{x * 1000:11.2f}" if not math.isnan(x) else f"{'-':>11}"

    rate = table["success_rate"].iloc[0] if len(table) else math.nan
    for row in table.itertuples():
        lines.append(
            f"{row.phase:<24}{fmt(row.p50)}{fmt(row.p95)}{fmt(row.mean)}{row.n:>6}{rate:>9.0%}"
        )
    lines.append(
        f"{'per action':<24}{fmt(action_row['p50'])}{fmt(action_row['p95'])}"
        f"{fmt(action_row['mean'])}{action_row['n']:>6}{rate:>9.0%}"
    )
    errors = runs.loc[runs["status"] != "ok", "error_class"].value_counts()
    for error_class, count in errors.items():
        lines.append(f"failed: {count} x {error_class}")
    return "\n".join(lines)


def cmd_export(args: argparse.Namespace) -> int:
    if not args.out.parent.is_dir():
        raise UsageError(f"--out {args.out}: folder {args.out.parent} does not exist")
    if args.out.is_dir():
        raise UsageError(f"--out {args.out} is a folder")
    with _open_store(args.db, create=False) as store:
        try:
            n = store.export_csv(args.table, args.out, substrate=args.substrate, tier=args.tier)
        except OSError as exc:
            raise UsageError(f"cannot write {args.out}: {exc.strerror}") from None
    print(f"wrote {n} {args.table} rows to {args.out}", file=sys.stderr)
    return 0


def cmd_image(args: argparse.Namespace) -> int:
    from rtax.image import BASE_IMAGE, RUNNER_IMAGE, ensure_runner

    image_id = ensure_runner(base=args.base or BASE_IMAGE, force=args.force, log=_logger(False))
    print(f"{RUNNER_IMAGE} {image_id}")
    return 0


def cmd_reap(args: argparse.Namespace) -> int:
    from rtax import config

    names = args.substrate
    if not names:  # every built-in name and every configured one that isn't an emulation's
        try:
            configured = config.load(args.config).substrates
        except (ConfigError, OSError) as exc:
            if args.config is not None:
                raise
            print(f"rtax reap: configuration not used: {exc}", file=sys.stderr)
            configured = {}
        names = sorted(set(builtin_names()) | {n for n, c in configured.items() if not c.emulate})
    substrates = []
    for name in names:
        try:
            # the real service's leftovers; an emulation reaps its own when it starts
            substrates.append(_substrate(name, use_emulation=False, config_path=args.config))
        except UsageError as exc:
            if args.substrate:  # asked for explicitly: it must work
                raise
            print(f"rtax reap: skipping {name}: {exc}", file=sys.stderr)
    older = None if args.older_than is None else args.older_than * 60

    def skip(name: str, exc: Exception) -> None:
        print(f"rtax reap: skipping {name}: {type(exc).__name__}: {exc}", file=sys.stderr)

    orphans = reaper.reap(
        substrates,
        older_than_s=older,
        dry_run=args.dry_run,
        on_error=None if args.substrate else skip,  # asked for explicitly: it must work
    )
    verb = "would remove" if args.dry_run else "removed"
    for orphan in orphans:
        print(
            f"{verb} {orphan.substrate} {orphan.leftover.env_id} "
            f"(run {orphan.leftover.run_id}): {orphan.reason}"
        )
    print(f"{verb} {len(orphans)} orphan(s)", file=sys.stderr)
    return 0


def cmd_config(args: argparse.Namespace) -> int:
    from rtax import config

    conf = config.load(args.config)
    plans = ", ".join(
        f"{p.name} ({p.tier}{f' S={p.steps}' if p.steps else ''}, every {p.interval_s:g} s)"
        for p in conf.plans
    )
    print(
        f"{conf.path}: ok; database {conf.database}; substrates "
        f"{', '.join(conf.substrates)}; plans {plans or 'none'}"
    )
    return 0


def cmd_schedule(args: argparse.Namespace) -> int:
    import logging

    from rtax import config
    from rtax.scheduler import LockHeld, Prober

    conf = config.load(args.config)
    logging.basicConfig(
        level=logging.INFO, stream=sys.stderr, format="%(asctime)s %(levelname)s %(message)s"
    )
    logging.getLogger("apscheduler").setLevel(logging.WARNING)
    prober = Prober(conf)
    try:
        prober.start()
    except LockHeld as exc:
        raise UsageError(str(exc)) from None
    except (KeyboardInterrupt, UsageError):
        raise
    except Exception as exc:  # e.g. a required (non-optional) substrate is not usable here
        raise UsageError(f"cannot start: {type(exc).__name__}: {exc}") from None
    try:
        prober.stopped.wait()  # until Ctrl-C or SIGTERM (both raise here)
    finally:
        # Rollouts in flight end at their next step, clean up and are not recorded; the lock
        # goes last, so no second scheduler can overlap this one.
        prober.stop(wait=True)
    return 0


def cmd_emulate(args: argparse.Namespace) -> int:
    """Serve the emulations in the foreground and publish where (README.md#emulations), so that
    `rtax probe --substrate KIND` uses them while this runs."""
    from rtax import emulation

    kinds = list(dict.fromkeys(args.kinds)) or emulation.kinds()
    log = _logger(False)
    publisher = emulation.Publisher()
    try:
        publisher.acquire()  # before starting anything: one `rtax emulate` per data folder
    except emulation.EmulationsBusy as exc:
        raise UsageError(str(exc)) from None
    started: list = []
    try:
        try:
            started = emulation.start_all(kinds, log=log)
        except (KeyboardInterrupt, UsageError):
            raise
        except Exception as exc:  # e.g. no Docker engine for the environments
            raise UsageError(f"cannot start the emulations: {type(exc).__name__}: {exc}") from None
        path = publisher.publish({e.kind: e.substrate_params() for e in started})
        log(f"published in {path}; every sample taken through these is labelled emulated")
        for emu in started:
            log(f"  rtax probe --substrate {emu.kind} --tier T2 --repeat 3")
        log("Ctrl-C stops the emulations and removes their containers")
        threading.Event().wait()  # until Ctrl-C or SIGTERM (both raise here)
    finally:
        publisher.release()  # first: no new probe may pick up what is about to go
        try:
            emulation.stop_all(started)
        except RuntimeError as exc:  # reported, and the interrupt still ends the command
            print(f"rtax emulate: {exc}", file=sys.stderr)
    return 0


def cmd_health(args: argparse.Namespace) -> int:
    import urllib.request

    from rtax import config
    from rtax.scheduler import LockHeld, SchedulerLock

    problems = []
    try:
        with urllib.request.urlopen(args.url, timeout=5) as answer:
            if answer.read().strip() != b"ok":
                problems.append(f"dashboard at {args.url} did not answer ok")
    except OSError as exc:
        problems.append(f"dashboard at {args.url}: {exc}")
    try:
        lock = SchedulerLock(config.load(args.config).database)
        lock.acquire()  # we got it: no scheduler holds it
        lock.release()
        problems.append("no scheduler holds the database lock")
    except LockHeld:
        pass  # a scheduler is running
    except config.ConfigError as exc:
        problems.append(f"configuration: {exc.problems[0]}")
    except OSError as exc:
        problems.append(f"cannot check the scheduler lock: {exc}")
    for problem in problems:
        print(f"rtax health: {problem}", file=sys.stderr)
    return 1 if problems else 0


def cmd_fixtures(args: argparse.Namespace) -> int:
    fixture = fixtures.build(force=args.force)
    print(
        f"attrs {fixture.attrs_version} fixture at {fixture.root}\n"
        f"  pristine {fixture.pristine_commit}\n"
        f"  buggy    {fixture.buggy_commit}  ({fixture.bug_summary})\n"
        f"  failing  {fixture.failing_test}\n"
        f"  fix      {fixture.fix_patch_path}\n"
        f"  clone    {fixture.bare_repo}"
    )
    # The workload toolchain is the fixture's other half: the programs the workloads run.
    bin_dir = toolchain.ensure_local(lambda m: print(m, file=sys.stderr))
    print(f"workload toolchain (Python {toolchain.load().python}) at {bin_dir.parent}")
    if not args.serve:
        return 0
    with GitServer(fixture.root, host=args.host, port=args.port) as server:
        print(f"serving {server.url(fixture.bare_repo.name)} (Ctrl-C to stop)", flush=True)
        try:
            while True:
                time.sleep(3600)  # idle until interrupted; the daemon does the work
        except KeyboardInterrupt:
            return 0
