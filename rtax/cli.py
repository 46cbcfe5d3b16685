"""The `rtax` command line: thin wrappers that map flags onto library calls.

Why thin (docs/cli.md; the sqlite-utils habit): every command maps its flags onto one library
call and turns library errors into one line on stderr with exit code 2, so that scripts and the
scheduler can rely on the library alone and the CLI adds no behaviour of its own. What a name
stands for, and how it becomes a ready substrate, is `rtax.compose`'s alone.
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, NoReturn

from rtax.assets import attrs as fixtures
from rtax.assets import toolchain
from rtax.assets.attrs import FixtureError
from rtax.assets.image import ImageError
from rtax.assets.toolchain import ToolchainError
from rtax.compose import ComposeError
from rtax.core import redaction, workloads
from rtax.core.failures import HarnessError
from rtax.core.version import __version__
from rtax.core.workloads import WorkloadError
from rtax.service import stopping
from rtax.service.stopping import STOP, Terminated, signals
from rtax.settings.config import ConfigError
from rtax.settings.loads import MAX_ROLLOUTS, SHAPES, LoadError
from rtax.store.database import StoreError
from rtax.store.spool import MEMORY
from rtax.substrates import UnknownSubstrate
from rtax.substrates import names as builtin_names

EXIT_USAGE = 2
#: Every rollout was measured, but some are not in the database yet (spooled) or were lost.
EXIT_NOT_STORED = 3
EXIT_INTERRUPTED = 130
EXIT_TERMINATED = 143
MAX_SEED = 2**63 - 1
#: Library errors that are the user's to fix: one line each, exit code 2.
_ONE_LINE = (ComposeError, StoreError, FixtureError, WorkloadError, UnknownSubstrate)
_ONE_LINE += (ImageError, ToolchainError, HarnessError, LoadError)


class UsageError(Exception):
    """Bad input from the user: one line on stderr, exit code 2."""


class _Parser(argparse.ArgumentParser):
    """argparse, but an error is one line (no usage dump), still exit code 2."""

    def error(self, message: str) -> NoReturn:
        self.exit(EXIT_USAGE, f"{self.prog}: error: {message}\n")


def number(
    kind: type[int] | type[float] = int,
    *,
    low: float = 0,
    high: float | None = None,
    positive: bool = False,
) -> Callable[[str], float]:
    """The one argparse type for numbers: finite, of `kind`, in [`low`, `high`] (above 0 if
    `positive`); an error names the value and the bound it breaks."""
    noun = "whole number" if kind is int else "number"
    floor = "a positive number" if positive else "0 or more" if low == 0 else f"at least {low}"

    def parse(text: str) -> float:
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not a {noun}: {text!r}") from None
        if math.isinf(value) or not (value > 0 if positive else value >= low):
            raise argparse.ArgumentTypeError(f"must be {floor}, got {text}")
        if high is not None and value > high:
            raise argparse.ArgumentTypeError(f"must be at most {high}, got {text}")
        return value

    return parse


def _duration(text: str) -> float:
    """A duration flag: seconds, or a number with a unit (250ms, 2s, 1m), above 0."""
    from rtax.settings.config import duration

    try:
        value = duration(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be above 0, got {text}")
    return value


def build_parser() -> argparse.ArgumentParser:
    """Every command and flag; the help is short because docs/cli.md is the reference."""
    parser = _Parser(prog="rtax", description="Measure the rollout infrastructure tax.")
    parser.add_argument("--version", action="version", version=f"rtax {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    conf = _Parser(add_help=False)  # parents: one declaration of each shared flag
    conf.add_argument("--config", type=Path, help="configuration file (docs/configuration.md)")
    db = _Parser(add_help=False)
    db.add_argument("--db", type=Path, help="database (default data/rtax.db)")
    seconds = number(float, positive=True)

    probe = sub.add_parser("probe", parents=[conf, db], help="run rollouts, store every sample")
    builtins = ", ".join(builtin_names())
    probe.add_argument("--substrate", default="local", help=f"configured or built in ({builtins})")
    probe.add_argument("--tier", choices=workloads.TIERS, default="T0")
    probe.add_argument("--steps", type=number(int), default=0, help="T2 trajectory length")
    probe.add_argument("--repeat", type=number(int, low=1), default=1, help="rollouts to run")
    probe.add_argument("--seed", type=number(int, high=MAX_SEED), default=0, help="trajectory seed")
    probe.add_argument(
        "--deadline", type=seconds, default=3600.0, help="rollout wall-time limit, s"
    )
    probe.add_argument("--action-timeout", type=seconds, help="every command's timeout, seconds")
    probe.add_argument("--repo-url", default="serve", help="T2's repository: serve, path or a URL")
    probe.add_argument("--commit", help="T2 commit (default: the fixture's buggy one)")
    probe.add_argument("--fix-patch", type=Path, help="T2 fix patch file (default: the fixture's)")
    probe.add_argument("--failing-test", help="T2 test the patch fixes (default: the fixture's)")
    probe.add_argument("--mode", choices=("exec", "session"), help="container action mode")
    probe.add_argument("--quiet", action="store_true", help="no progress bar or summary")

    burst = sub.add_parser(
        "burst", parents=[conf, db], help="a load run: sequential, staggered or burst rollouts"
    )
    burst.add_argument("--load", metavar="NAME", help="a [[loads]] entry (docs/load.md)")
    burst.add_argument("--substrate", help="default local (or the load's)")
    burst.add_argument("--tier", choices=workloads.TIERS, help="default T0")
    burst.add_argument("--steps", type=number(int), help="T2 trajectory length")
    burst.add_argument("--shape", choices=SHAPES, help="default burst")
    burst.add_argument(
        "--rollouts", "-n", type=number(int, low=1, high=MAX_ROLLOUTS), help="default 20"
    )
    burst.add_argument("--every", type=_duration, help="staggered: launch interval, e.g. 250ms")
    burst.add_argument("--mode", choices=("exec", "session"), help="container action mode")
    burst.add_argument("--seed", type=number(int, high=MAX_SEED), default=0, help="trajectory seed")
    burst.add_argument("--deadline", type=seconds, default=3600.0, help="per rollout, s")
    burst.add_argument("--quiet", action="store_true", help="no progress bar or summary")

    export = sub.add_parser("export", parents=[db], help="write runs or actions to a CSV file")
    export.add_argument("--table", choices=("runs", "actions"), required=True)
    export.add_argument("--out", type=Path, required=True, help="CSV file to write")
    export.add_argument("--substrate", help="only this substrate")
    export.add_argument("--tier", choices=workloads.TIERS, help="only this tier")

    inc = sub.add_parser("incidents", parents=[db], help="list open incidents (docs/alerts.md)")
    inc.add_argument("--all", action="store_true", help="resolved ones too, newest first")
    inc.add_argument("--limit", type=number(int, low=1), default=50, help="at most this many")

    image = sub.add_parser("image", help="the Docker runner image")
    image_sub = image.add_subparsers(dest="image_command", required=True, parser_class=_Parser)
    build = image_sub.add_parser("build", help="build the runner image (a no-op if current)")
    build.add_argument("--base", help="base image (default: a Debian rootfs by mmdebstrap)")
    build.add_argument("--force", action="store_true", help="rebuild even if current")

    reap = sub.add_parser(
        "reap", parents=[conf], help="remove expired environments and those no live run owns"
    )
    reap.add_argument("--substrate", action="append", help="repeatable (default: all reachable)")
    reap.add_argument(
        "--older-than", type=number(float), metavar="MIN", help="only older, in minutes"
    )
    reap.add_argument("--dry-run", action="store_true", help="list, remove nothing")

    sub.add_parser("schedule", parents=[conf], help="run the configured plans until stopped")
    config_sub = sub.add_parser("config", help="the configuration file").add_subparsers(
        dest="config_command", required=True, parser_class=_Parser
    )
    config_sub.add_parser("check", parents=[conf], help="validate it: a line per mistake, exit 2")
    health = sub.add_parser("health", parents=[conf], help="the app image's healthcheck")
    health.add_argument("--url", help="default: the dashboard's, from the configuration")
    dash = sub.add_parser("dashboard", parents=[conf], help="serve the dashboard (127.0.0.1)")
    dash.add_argument("--address", help="listen here (default: [dashboard] address, 127.0.0.1)")
    dash.add_argument("--port", type=number(int, low=1, high=65535), help="default: 8501")

    from rtax.emulation import kinds

    emulate = sub.add_parser("emulate", help="serve local emulations of the clouds until stopped")
    emulate.add_argument(
        "kinds", nargs="*", choices=kinds(), metavar="KIND", help=", ".join(kinds())
    )

    fix = sub.add_parser("fixtures", help="build the attrs fixture and the workload toolchain")
    fix.add_argument("--force", action="store_true", help="rebuild even if up to date")
    fix.add_argument("--serve", action="store_true", help="then serve it over git://")
    fix.add_argument("--host", default="127.0.0.1", help="address to serve on")
    fix.add_argument("--port", type=number(int, high=65535), default=9418, help="port to serve on")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    redaction.install()  # before any command logs: schedule, emulate, probe alike
    args = build_parser().parse_args(argv)
    handler = {
        "probe": cmd_probe,
        "burst": cmd_burst,
        "export": cmd_export,
        "incidents": cmd_incidents,
        "fixtures": cmd_fixtures,
        "image": cmd_image,
        "reap": cmd_reap,
        "schedule": cmd_schedule,
        "config": cmd_config,
        "health": cmd_health,
        "dashboard": cmd_dashboard,
        "emulate": cmd_emulate,
    }[args.command]
    try:
        with signals():
            return handler(args)
    except Terminated:
        print(f"rtax {args.command}: terminated; cleaned up", file=sys.stderr)
        return EXIT_TERMINATED
    except KeyboardInterrupt:
        print(f"rtax {args.command}: interrupted; cleaned up", file=sys.stderr)
        return EXIT_INTERRUPTED
    except ConfigError as exc:  # every mistake, one line each
        for problem in exc.problems:
            print(f"rtax {args.command}: error: {redaction.scrub(problem)}", file=sys.stderr)
        return EXIT_USAGE
    except (UsageError, *_ONE_LINE) as exc:
        print(f"rtax {args.command}: error: {redaction.scrub(str(exc))}", file=sys.stderr)
        return EXIT_USAGE


def _stderr(message: str) -> None:
    print(message, file=sys.stderr)


def cmd_probe(args: argparse.Namespace) -> int:
    import logging

    from rtax.rollouts import probe as batch

    # One line at the end says what was spooled (`_report_spooled`), not a log line per try.
    logging.getLogger("rtax.store.spool").addHandler(logging.NullHandler())

    done = batch.probe(
        args.substrate,
        tier=args.tier,
        steps=args.steps,
        repeat=args.repeat,
        seed=args.seed,
        db=args.db,
        config=args.config,
        deadline=args.deadline,
        action_timeout=args.action_timeout,
        repo_url=args.repo_url,
        commit=args.commit,
        fix_patch=args.fix_patch,
        failing_test=args.failing_test,
        mode=args.mode,
        log=None if args.quiet else _stderr,
        progress=not args.quiet,
        stop=STOP,
    )
    return _ended(
        done,
        "probe",
        args.quiet,
        f"{len(done.records)} rollouts saved; the one in progress was cleaned up and not recorded",
    )


def cmd_burst(args: argparse.Namespace) -> int:
    import logging

    from rtax.rollouts import burst as load

    logging.getLogger("rtax.store.spool").addHandler(logging.NullHandler())
    try:
        plan = load.plan_of(
            args.load,
            args.config,
            substrate=args.substrate,
            tier=args.tier,
            steps=args.steps,
            shape=args.shape,
            n=args.rollouts,
            every_s=args.every,
            mode=args.mode,
        )
    except LoadError as exc:  # named by its flag; a named load's own mistakes by its key
        if exc.key is None:
            raise
        flag = {"n": "rollouts"}.get(exc.key, exc.key)
        raise UsageError(f"--{flag}: {exc.reason}") from None
    done = load.burst(
        plan,
        db=args.db,
        config=args.config,
        deadline=args.deadline,
        seed=args.seed,
        log=None if args.quiet else _stderr,
        progress=not args.quiet,
        stop=STOP,
    )
    left = f"; {done.abandoned} still busy, left to the reaper" if done.abandoned else ""
    return _ended(
        done,
        "burst",
        args.quiet,
        f"load {done.load_id} marked interrupted, {len(done.records)} rollouts saved; those in "
        f"flight were cleaned up and not recorded{left}",
    )


def _ended(done: Any, command: str, quiet: bool, interrupted: str) -> int:
    """How `probe` and `burst` end: what was replayed or spooled, the summary (or, quiet, the
    failures), and the exit code (docs/cli.md)."""
    if done.replayed:
        print(f"rtax {command}: wrote {done.replayed} rollouts spooled earlier", file=sys.stderr)
    not_stored = _report_spooled(done, command)
    if done.interrupted is not None:
        terminated = isinstance(done.interrupted, Terminated) or stopping.terminated()
        print(f"\n{'terminated' if terminated else 'interrupted'}: {interrupted}", file=sys.stderr)
        return EXIT_TERMINATED if terminated else EXIT_INTERRUPTED
    if not quiet:
        print(done.summary())
    elif done.failed:
        print(
            f"rtax {command}: {done.failed} of {len(done.records)} rollouts failed (kept, "
            f"classified, in {done.db})",
            file=sys.stderr,
        )
    if not_stored:
        return EXIT_NOT_STORED
    return 0 if not done.failed else 1


def _report_spooled(done: Any, command: str) -> bool:
    """One line for the rollouts the database could not take (spooled, or lost); whether any."""
    if not done.spooled:
        return False
    files = sorted({where for where in done.spooled.values() if where != MEMORY})
    kept = len(done.spooled) - len(done.lost)
    if kept:
        print(
            f"rtax {command}: database busy or unavailable: {kept} rollouts spooled to "
            f"{', '.join(files)}, not yet in {done.db}; the next rtax probe or rtax schedule "
            "on it writes them",
            file=sys.stderr,
        )
    if done.lost:
        print(
            f"rtax {command}: {len(done.lost)} rollouts could be neither stored nor spooled "
            f"(no writable spool): lost: {', '.join(done.lost)}",
            file=sys.stderr,
        )
    return True


def cmd_export(args: argparse.Namespace) -> int:
    from rtax.compose import open_store

    if not args.out.parent.is_dir():
        raise UsageError(f"--out {args.out}: folder {args.out.parent} does not exist")
    if args.out.is_dir():
        raise UsageError(f"--out {args.out} is a folder")
    with open_store(args.db, create=False) as store:
        try:
            n = store.runs.export_csv(
                args.table, args.out, substrate=args.substrate, tier=args.tier
            )
        except OSError as exc:
            raise UsageError(f"cannot write {args.out}: {exc.strerror}") from None
    print(f"wrote {n} {args.table} rows to {args.out}", file=sys.stderr)
    return 0


def cmd_incidents(args: argparse.Namespace) -> int:
    from rtax.analysis.incidents import listing
    from rtax.compose import open_store

    with open_store(args.db, create=False) as store:
        frame = store.incidents.read(state=None if args.all else "open", limit=args.limit)
    print("\n".join(listing(frame)))
    return 0


def cmd_image(args: argparse.Namespace) -> int:
    from rtax.assets.image import BASE_IMAGE, RUNNER_IMAGE, ensure_runner

    image_id = ensure_runner(base=args.base or BASE_IMAGE, force=args.force, log=_stderr)
    print(f"{RUNNER_IMAGE} {image_id}")
    return 0


def cmd_reap(args: argparse.Namespace) -> int:
    from rtax.compose import Composition
    from rtax.substrates import reaper

    def note(message: str) -> None:
        print(f"rtax reap: {message}", file=sys.stderr)

    # the real services' leftovers; an emulation reaps its own when it starts
    composition = Composition(config_path=args.config, emulations="off")
    orphans = reaper.reap(
        composition.reap_targets(args.substrate, note),
        older_than_s=None if args.older_than is None else args.older_than * 60,
        dry_run=args.dry_run,
        # asked for explicitly: it must work; else a substrate that can't be listed is skipped
        on_error=None
        if args.substrate
        else lambda name, exc: note(f"skipping {name}: {type(exc).__name__}: {exc}"),
    )
    verb = "would remove" if args.dry_run else "removed"
    for orphan in orphans:
        done = f"could not remove ({orphan.error})" if orphan.error else verb
        print(
            f"{done} {orphan.substrate} {orphan.leftover.env_id} "
            f"(run {orphan.leftover.run_id}){' EXPIRED' if orphan.expired else ''}: "
            f"{orphan.reason}"
        )
    failed = sum(1 for o in orphans if o.error)
    expired = sum(1 for o in orphans if o.expired)
    print(
        f"{verb} {len(orphans) - failed} orphan(s), {expired} of them expired"
        + (f"; {failed} could not be removed" if failed else ""),
        file=sys.stderr,
    )
    return 1 if failed else 0


def cmd_config(args: argparse.Namespace) -> int:
    from rtax.settings import config

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

    from rtax.service.scheduler import LockHeld, Prober
    from rtax.settings import config

    conf = config.load(args.config)
    logging.basicConfig(
        level=logging.INFO, stream=sys.stderr, format="%(asctime)s %(levelname)s %(message)s"
    )
    logging.getLogger("apscheduler").setLevel(logging.WARNING)
    try:
        Prober(conf).serve(until=STOP)  # until Ctrl-C or SIGTERM
    except LockHeld as exc:
        raise UsageError(str(exc)) from None
    except Exception as exc:  # e.g. a required (non-optional) substrate is not usable here
        raise UsageError(f"cannot start: {type(exc).__name__}: {exc}") from None
    return 0


def cmd_emulate(args: argparse.Namespace) -> int:
    """Serve the emulations in the foreground and publish where (docs/emulations.md), so that
    `rtax probe --substrate KIND` uses them while this runs."""
    from rtax import emulation
    from rtax.compose import serve_emulations

    kinds = list(dict.fromkeys(args.kinds)) or emulation.kinds()
    serve_emulations(kinds, _stderr, until=STOP.wait)  # until Ctrl-C or SIGTERM
    return 0


def cmd_dashboard(args: argparse.Namespace) -> int:
    """Replace this process by `streamlit run` on the resolved address (docs/dashboard.md)."""
    import os

    from rtax.dashboard import serve
    from rtax.settings import config

    conf = config.load(args.config)
    try:
        where = serve.resolve(conf.dashboard, args.address, args.port)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    if args.config:  # the pages read the same file
        os.environ["RTAX_CONFIG"] = str(args.config)
    print(f"rtax dashboard: http://{where.address}:{where.port}", file=sys.stderr, flush=True)
    argv = serve.command(where)
    os.execv(argv[0], argv)


def cmd_health(args: argparse.Namespace) -> int:
    from rtax.dashboard import serve
    from rtax.service.lock import health
    from rtax.settings import config

    url = args.url
    if url is None:
        try:
            configured = config.load(args.config).dashboard
        except ConfigError:
            configured = serve.Dashboard()  # health() reports the configuration's problem
        url = serve.resolve(configured).health_url
    problems = health(url, args.config)
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
    bin_dir = toolchain.ensure_local(_stderr)
    print(f"workload toolchain (Python {toolchain.load().python}) at {bin_dir.parent}")
    if not args.serve:
        return 0
    with fixtures.GitServer(fixture.root, host=args.host, port=args.port) as server:
        print(f"serving {server.url(fixture.bare_repo.name)} (Ctrl-C to stop)", flush=True)
        try:
            while True:
                time.sleep(3600)  # idle until interrupted; the daemon does the work
        except KeyboardInterrupt:
            return 0
