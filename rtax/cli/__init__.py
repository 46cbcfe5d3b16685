"""The `rtax` command line: thin wrappers that map flags onto library calls.

Why thin (docs/cli.md; the sqlite-utils habit): every command maps its flags onto one library
call and turns library errors into one line on stderr with exit code 2, so that scripts and the
scheduler can rely on the library alone and the CLI adds no behaviour of its own. What a name
stands for, and how it becomes a ready substrate, is `rtax.compose`'s alone.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

from rtax.cli.alerts import cmd_detection_eval, cmd_incidents, cmd_maintenance
from rtax.cli.commands import (
    cmd_backup,
    cmd_config,
    cmd_dashboard,
    cmd_emulate,
    cmd_export,
    cmd_fixtures,
    cmd_health,
    cmd_image,
    cmd_reap,
    cmd_schedule,
)
from rtax.cli.flags import (
    EXIT_INTERRUPTED,
    EXIT_NOT_STORED,
    EXIT_TERMINATED,
    EXIT_USAGE,
    ONE_LINE,
    UsageError,
)
from rtax.cli.parser import build_parser
from rtax.cli.rollouts import cmd_burst, cmd_fork, cmd_probe
from rtax.core import redaction
from rtax.service.stopping import Terminated, signals
from rtax.settings.config import ConfigError

__all__ = ["EXIT_NOT_STORED", "EXIT_TERMINATED", "EXIT_USAGE", "build_parser", "main"]


def main(argv: Sequence[str] | None = None) -> int:
    redaction.install()  # before any command logs: schedule, emulate, probe alike
    args = build_parser().parse_args(argv)
    handler = {
        "probe": cmd_probe,
        "burst": cmd_burst,
        "fork": cmd_fork,
        "export": cmd_export,
        "backup": cmd_backup,
        "incidents": cmd_incidents,
        "maintenance": cmd_maintenance,
        "detection-eval": cmd_detection_eval,
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
    except (UsageError, *ONE_LINE) as exc:
        print(f"rtax {args.command}: error: {redaction.scrub(str(exc))}", file=sys.stderr)
        return EXIT_USAGE
