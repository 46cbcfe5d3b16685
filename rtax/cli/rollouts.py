"""``rtax probe`` and ``rtax burst``: their flags onto one library call each, and how they end
(what was replayed, spooled or lost, the summary, the exit code: docs/cli.md)."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from rtax.cli.flags import EXIT_INTERRUPTED, EXIT_NOT_STORED, EXIT_TERMINATED, UsageError, say
from rtax.service import stopping
from rtax.service.stopping import STOP, Terminated
from rtax.settings.loads import LoadError
from rtax.store.spool import MEMORY
from rtax.store.spool import log as spool_log


def cmd_probe(args: argparse.Namespace) -> int:
    import logging

    from rtax.rollouts import probe

    # One line at the end says what was spooled (`_report_spooled`), not a log line per try.
    spool_log.addHandler(logging.NullHandler())

    request = probe.Probe(
        args.substrate,
        tier=args.tier,
        steps=args.steps,
        repeat=args.repeat,
        seed=args.seed,
        mode=args.mode,
        db=args.db,
        config=args.config,
        deadline=args.deadline,
        action_timeout=args.action_timeout,
        repo_url=args.repo_url,
        commit=args.commit,
        fix_patch=args.fix_patch,
        failing_test=args.failing_test,
    )
    done = probe.probe(request, log=None if args.quiet else say, progress=not args.quiet, stop=STOP)
    return _ended(
        done,
        "probe",
        args.quiet,
        f"{len(done.records)} rollouts saved; the one in progress was cleaned up and not recorded",
    )


def cmd_burst(args: argparse.Namespace) -> int:
    import logging

    from rtax.rollouts import burst

    spool_log.addHandler(logging.NullHandler())
    try:
        plan = burst.plan_of(
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
    done = burst.burst(
        plan,
        db=args.db,
        config=args.config,
        deadline=args.deadline,
        seed=args.seed,
        log=None if args.quiet else say,
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


def cmd_fork(args: argparse.Namespace) -> int:
    import logging

    from rtax.rollouts import fork

    spool_log.addHandler(logging.NullHandler())
    done = fork.fork(
        args.substrate,
        args.group,
        db=args.db,
        config=args.config,
        deadline=args.deadline,
        log=None if args.quiet else say,
        progress=not args.quiet,
        stop=STOP,
    )
    if done.interrupted is not None:
        terminated = isinstance(done.interrupted, Terminated) or stopping.terminated()
        print(
            f"\n{'terminated' if terminated else 'interrupted'}: the groups run so far are "
            "stored; the one in flight was cleaned up",
            file=sys.stderr,
        )
        return EXIT_TERMINATED if terminated else EXIT_INTERRUPTED
    failed = sum(
        int(r.row.get("rollouts") or 0) - int(r.row.get("ok") or 0) for r in done.runs.values()
    )
    if not args.quiet:
        print(done.summary())
    return 1 if failed else 0


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
