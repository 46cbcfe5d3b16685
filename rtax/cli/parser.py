"""Every command and flag of ``rtax``; the help is short because docs/cli.md is the reference."""

from __future__ import annotations

import argparse
from pathlib import Path

from rtax.cli.flags import MAX_SEED, Parser, duration_flag, number
from rtax.core import workloads
from rtax.core.version import __version__
from rtax.settings.loads import MAX_ROLLOUTS, SHAPES
from rtax.substrates import names as builtin_names


def build_parser() -> argparse.ArgumentParser:
    """Every command and flag; the help is short because docs/cli.md is the reference."""
    parser = Parser(prog="rtax", description="Measure the rollout infrastructure tax.")
    parser.add_argument("--version", action="version", version=f"rtax {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=Parser)
    conf = Parser(add_help=False)  # parents: one declaration of each shared flag
    conf.add_argument("--config", type=Path, help="configuration file (docs/configuration.md)")
    db = Parser(add_help=False)
    db.add_argument(
        "--db", type=Path, help="database (default: the --config file's, else data/rtax.db)"
    )
    _rollouts(sub, conf, db)
    _data(sub, conf, db)
    _signals(sub, conf, db)
    _operations(sub, conf)
    return parser


def _rollouts(sub: argparse._SubParsersAction, conf: Parser, db: Parser) -> None:
    """``rtax probe``, ``rtax burst`` and ``rtax fork``."""
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
    burst.add_argument("--every", type=duration_flag, help="staggered: launch interval, e.g. 250ms")
    burst.add_argument("--mode", choices=("exec", "session"), help="container action mode")
    burst.add_argument("--seed", type=number(int, high=MAX_SEED), default=0, help="trajectory seed")
    burst.add_argument("--deadline", type=seconds, default=3600.0, help="per rollout, s")
    burst.add_argument("--quiet", action="store_true", help="no progress bar or summary")

    fork = sub.add_parser(
        "fork",
        parents=[conf, db],
        help="G environments at once from one snapshot, beside G cold and G warm (docs/load.md)",
    )
    fork.add_argument("--substrate", required=True, help="a kind that snapshots (docker, ...)")
    fork.add_argument(
        "--group", "-g", type=number(int, low=1, high=MAX_ROLLOUTS), default=8, help="G"
    )
    fork.add_argument("--deadline", type=seconds, default=3600.0, help="per rollout, s")
    fork.add_argument("--quiet", action="store_true", help="no progress bar or summary")


def _data(sub: argparse._SubParsersAction, conf: Parser, db: Parser) -> None:
    """What the database holds: ``rtax export``, ``rtax backup`` and ``rtax incidents``."""
    export = sub.add_parser("export", parents=[db], help="write runs or actions to a CSV file")
    export.add_argument("--table", choices=("runs", "actions"), required=True)
    export.add_argument("--out", type=Path, required=True, help="CSV file to write")
    export.add_argument("--substrate", help="only this substrate")
    export.add_argument("--tier", choices=workloads.TIERS, help="only this tier")

    back = sub.add_parser(
        "backup",
        parents=[conf, db],
        help="copy the live database, checked, while the scheduler writes (docs/data.md)",
    )
    back.add_argument("--out", type=Path, required=True, help="the copy to write")
    back.add_argument("--force", action="store_true", help="replace --out if it exists")

    inc = sub.add_parser("incidents", parents=[db], help="list open incidents (docs/alerts.md)")
    inc.add_argument("--all", action="store_true", help="resolved ones too, newest first")
    inc.add_argument("--limit", type=number(int, low=1), default=50, help="at most this many")
    # a subcommand's --db must not reset the one given before it (argparse's defaults would)
    later_db = Parser(add_help=False)
    later_db.add_argument("--db", type=Path, default=argparse.SUPPRESS, help="database")
    moves = inc.add_subparsers(dest="incidents_command", parser_class=Parser)
    ack = moves.add_parser("ack", parents=[later_db], help="acknowledge: someone is on it")
    ack.add_argument("id", type=number(int, low=1), help="the incident's id")
    ack.add_argument("--note", help="who, or what is being done")
    res = moves.add_parser("resolve", parents=[later_db], help="resolve by hand, with a note")
    res.add_argument("id", type=number(int, low=1), help="the incident's id")
    res.add_argument("--note", required=True, help="why it is resolved (stored with it)")


def _signals(sub: argparse._SubParsersAction, conf: Parser, db: Parser) -> None:
    """Maintenance windows and the detection evaluation (docs/alerts.md)."""
    maint = sub.add_parser("maintenance", help="maintenance windows: incidents kept, no alerts")
    moves = maint.add_subparsers(dest="maintenance_command", required=True, parser_class=Parser)
    add = moves.add_parser("add", parents=[conf, db], help="add a window (now, until --end)")
    add.add_argument(
        "--series",
        action="append",
        metavar="DIMENSION=VALUE[,VALUE]",
        help="repeatable, e.g. substrate=docker tier=T0 (default: every series)",
    )
    add.add_argument("--start", help="ISO 8601, UTC unless it says (default: now)")
    until = add.add_mutually_exclusive_group(required=True)
    until.add_argument("--end", help="ISO 8601, UTC unless it says")
    until.add_argument("--for", dest="duration", type=duration_flag, help="e.g. 2h, from --start")
    add.add_argument("--reason", required=True, help="marks every incident inside the window")
    listing = moves.add_parser("list", parents=[conf, db], help="current and coming windows")
    listing.add_argument("--all", action="store_true", help="ended ones too")
    remove = moves.add_parser("remove", parents=[conf, db], help="delete a window added here")
    remove.add_argument("id", type=number(int, low=1), help="its id (rtax maintenance list)")

    from rtax.cli.alerts import default_recording

    ev = sub.add_parser(
        "detection-eval", parents=[conf], help="replay detection over labelled and real series"
    )
    ev.add_argument("--series", type=Path, help="replay this CSV and list what it would open")
    recorded = default_recording()
    ev.add_argument(
        "--real",
        type=Path,
        default=recorded if recorded.is_file() else None,
        help="recorded series (default: benchmarks/series/recorded.csv.gz)",
    )
    ev.add_argument("--series-count", type=number(int, low=1), default=20, help="per family")
    ev.add_argument("--length", type=number(int, low=300), default=5000, help="samples each")
    ev.add_argument("--trials", type=number(int, low=1), default=200, help="per change family")
    ev.add_argument("--seed", type=number(int, high=MAX_SEED), default=0)
    ev.add_argument("--jobs", type=number(int, low=1), help="processes (default: every core)")


def _operations(sub: argparse._SubParsersAction, conf: Parser) -> None:
    """Running rtax: the image, the reaper, the scheduler and its configuration, the health
    check, the dashboard, the emulations and the fixture."""
    image = sub.add_parser("image", help="the Docker runner image")
    image_sub = image.add_subparsers(dest="image_command", required=True, parser_class=Parser)
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
        dest="config_command", required=True, parser_class=Parser
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
