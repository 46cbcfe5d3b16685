"""The commands around the rollouts: export, the image, the reaper, the
configuration check, the scheduler, the emulations, the dashboard, the health check and the
fixture; each maps its flags onto one library call (docs/cli.md)."""

from __future__ import annotations

import argparse
import sys
import time

from rtax.assets import attrs, toolchain
from rtax.cli.flags import UsageError, say
from rtax.service.stopping import STOP
from rtax.settings.config import ConfigError


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


def cmd_backup(args: argparse.Namespace) -> int:
    """A checked copy of the live database (rtax.store.backup), safe while the scheduler runs."""
    from rtax.core import paths
    from rtax.settings.config import database_of
    from rtax.store.backup import backup

    source = args.db or (database_of(args.config) if args.config else None) or paths.default_db()
    made = backup(source, args.out, overwrite=args.force, log=lambda m: say(f"rtax backup: {m}"))
    print(
        f"rtax backup: {made.path}: {made.bytes / 1e6:,.1f} MB, {made.runs:,} runs and "
        f"{made.actions:,} actions (the database had {made.runs_before:,} runs as the copy "
        f"began), integrity {made.integrity}, in {made.seconds:.1f} s",
        file=sys.stderr,
    )
    return 0


def cmd_image(args: argparse.Namespace) -> int:
    from rtax.assets.image import BASE_IMAGE, RUNNER_IMAGE, ensure_runner

    image_id = ensure_runner(base=args.base or BASE_IMAGE, force=args.force, log=say)
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
        f"{', '.join(conf.substrates)}; plans {plans or 'none'}; objectives "
        f"{', '.join(o.name for o in conf.slos) or 'none'}"
    )
    return 0


def cmd_schedule(args: argparse.Namespace) -> int:
    import logging

    from rtax.service.lock import LockHeld
    from rtax.service.scheduler import Scheduler
    from rtax.settings import config

    conf = config.load(args.config)
    logging.basicConfig(
        level=logging.INFO, stream=sys.stderr, format="%(asctime)s %(levelname)s %(message)s"
    )
    logging.getLogger("apscheduler").setLevel(logging.WARNING)
    try:
        Scheduler(conf).serve(until=STOP)  # until Ctrl-C or SIGTERM
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
    serve_emulations(kinds, say, until=STOP.wait)  # until Ctrl-C or SIGTERM
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
    from rtax.service.health import health
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
    fixture = attrs.build(force=args.force)
    print(
        f"attrs {fixture.attrs_version} fixture at {fixture.root}\n"
        f"  pristine {fixture.pristine_commit}\n"
        f"  buggy    {fixture.buggy_commit}  ({fixture.bug_summary})\n"
        f"  failing  {fixture.failing_test}\n"
        f"  fix      {fixture.fix_patch_path}\n"
        f"  clone    {fixture.bare_repo}"
    )
    # The workload toolchain is the fixture's other half: the programs the workloads run.
    bin_dir = toolchain.ensure_local(say)
    print(f"workload toolchain (Python {toolchain.load().python}) at {bin_dir.parent}")
    if not args.serve:
        return 0
    with attrs.GitServer(fixture.root, host=args.host, port=args.port) as server:
        print(f"serving {server.url(fixture.bare_repo.name)} (Ctrl-C to stop)", flush=True)
        try:
            while True:
                time.sleep(3600)  # idle until interrupted; the daemon does the work
        except KeyboardInterrupt:
            return 0
