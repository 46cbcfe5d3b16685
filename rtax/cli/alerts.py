"""The commands about signals: ``rtax incidents`` (and ``ack``, ``resolve``), ``rtax
maintenance`` and ``rtax detection-eval``; each maps its flags onto library calls
(docs/cli.md, docs/alerts.md)."""

from __future__ import annotations

import argparse
import contextlib
import gzip
import os
import sys
from concurrent.futures import ProcessPoolExecutor
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from rtax.cli.flags import UsageError


def cmd_incidents(args: argparse.Namespace) -> int:
    """``rtax incidents`` lists; ``ack ID`` and ``resolve ID --note`` move one along."""
    from rtax.analysis.incidents import listing, stamp
    from rtax.compose import open_store

    action = getattr(args, "incidents_command", None)
    with open_store(args.db, create=False) as store:
        if action is None:
            frame = store.incidents.read(state=None if args.all else "open", limit=args.limit)
            print("\n".join(listing(frame)))
            return 0
        now = stamp(datetime.now(UTC))
        if store.incidents.get(args.id) is None:
            raise UsageError(f"no incident {args.id} (rtax incidents --all lists them)")
        if action == "ack":
            done = store.incidents.acknowledge(args.id, now, args.note)
        else:
            done = store.incidents.resolve(args.id, now, "manual", at=now, note=args.note)
        if not done:
            raise UsageError(f"incident {args.id} is already resolved")
        print("\n".join(listing(store.incidents.read(limit=None).query(f"id == {args.id}"))))
    return 0


def cmd_maintenance(args: argparse.Namespace) -> int:
    """``rtax maintenance add|list|remove``: the store's maintenance windows, beside the
    configuration's ``[[maintenance]]``."""
    from rtax.analysis.incidents import stamp
    from rtax.analysis.maintenance import from_rows
    from rtax.compose import open_store
    from rtax.settings.config import load

    config = load(args.config)
    database = args.db or config.database
    if args.maintenance_command == "add":
        window = _window(args, set(config.substrates))
        with open_store(database) as store:
            found = store.maintenance.add(
                window.selector,
                stamp(window.start),
                stamp(window.end),
                window.reason,
                stamp(datetime.now(UTC)),
            )
        print(f"maintenance window #{found}: {window.describe()}")
        return 0
    if args.maintenance_command == "remove":
        with open_store(database, create=False) as store:
            if not store.maintenance.remove(args.id):
                raise UsageError(f"no maintenance window #{args.id} (rtax maintenance list)")
        print(f"removed maintenance window #{args.id}")
        return 0
    now = datetime.now(UTC)
    rows = []
    if Path(database).is_file():  # no database yet: the file's windows only
        with open_store(database, create=False) as store:
            rows = store.maintenance.read(ending_after=None if args.all else stamp(now))
    windows = [w for w in config.maintenance if args.all or w.end > now] + from_rows(rows)
    for w in windows:
        print(f"{w.source:>7}  {w.describe()}")
    if not windows:
        print("no maintenance windows")
    return 0


def _window(args: argparse.Namespace, substrates: set[str]) -> Any:
    from rtax.settings import maintenance, selector

    problems: list[str] = []

    def bad(key: str, message: str) -> None:
        problems.append(f"{key}: {message}")

    entry: dict[str, Any] = {"reason": args.reason, "start": args.start or datetime.now(UTC)}
    if args.end is not None:
        entry["end"] = args.end
    elif args.duration is not None:
        with contextlib.suppress(ValueError):  # a bad --start is reported below
            entry["end"] = maintenance.moment(entry["start"]) + timedelta(seconds=args.duration)
    entry["series"] = selector.flags_table(args.series or [], bad)
    window = maintenance.window(entry, "maintenance", bad, substrates)
    if problems or window is None:
        raise UsageError("; ".join(problems).replace("maintenance.", "--"))
    return window


def cmd_detection_eval(args: argparse.Namespace) -> int:
    """Replay the configured detection and rules: over one CSV of the user's (the incidents it
    would open), or over the labelled families and the recorded real series (the table)."""
    from rtax.analysis import replay
    from rtax.settings.config import load

    config = load(args.config)
    if args.series is not None:
        for name, recording in _read(args.series, replay).items():
            found = replay.replay(recording, config.alerts.rules, config.detection)
            print(f"{args.series} ({name}): {len(recording)} samples, {len(found)} incidents")
            for incident in found:
                print("  " + _said(incident))
        return 0
    return _evaluate(args, config, replay)


def _read(path: Path, replay: Any) -> dict[str, Any]:
    opener = gzip.open if path.suffix == ".gz" else open
    try:
        with opener(path, "rt") as f:
            return replay.read_series(f.readlines(), name=path.stem)
    except OSError as exc:
        raise UsageError(f"cannot read {path}: {exc.strerror or exc}") from None
    except replay.SeriesFileError as exc:
        raise UsageError(f"{path}: {exc}") from None


def _said(incident: Any) -> str:
    end = (
        f"; resolved at sample {incident.resolved_at} ({incident.resolution})"
        if incident.resolved_at is not None
        else "; open at the end"
    )
    return (
        f"sample {incident.opened_at}: {incident.rule} opened (from sample {incident.start}): "
        f"{incident.detail}{end}"
    )


def _evaluate(args: argparse.Namespace, config: Any, replay: Any) -> int:
    from rtax.analysis import evaluation

    work = [("family", i) for i in range(len(evaluation.FAMILIES))]
    recorded: dict[str, Any] = {}
    if args.real is not None:
        recorded = _read(args.real, replay)
        work += [("real", name) for name in sorted(recorded)]
    jobs = max(1, min(args.jobs or os.cpu_count() or 1, len(work)))
    task = _Task(config, args.series_count, args.length, args.trials, args.seed, recorded)
    print(
        f"rtax detection-eval: {len(evaluation.FAMILIES)} families and {len(recorded)} "
        f"recorded series, through the configured rules ({config.path}), {jobs} processes...",
        file=sys.stderr,
    )
    with ProcessPoolExecutor(jobs) as pool:
        rows = list(pool.map(task, work))
    print("\n".join(evaluation.table(rows)))
    missed = [r.family for r in rows if r.meets is False]
    held = sum(1 for r in rows if r.meets is not None)
    if missed:
        print(f"rtax bench (detection) summary: {len(missed)} of {held} targets MISSED "
              f"({', '.join(missed)})")  # fmt: skip
    else:
        print(f"rtax bench (detection) summary: all {held} targets met")
    return 0


class _Task:
    """One row of the table, in a worker process (picklable: no closures)."""

    def __init__(
        self, config: Any, series: int, length: int, trials: int, seed: int, recorded: dict
    ) -> None:
        self.config, self.series, self.length = config, series, length
        self.trials, self.seed, self.recorded = trials, seed, recorded

    def __call__(self, item: tuple[str, Any]) -> Any:
        from rtax.analysis import evaluation, replay

        kind, which = item
        rules, detection = self.config.alerts.rules, self.config.detection
        if kind == "family":
            return evaluation.run_family(
                evaluation.FAMILIES[which], rules, detection, series=self.series,
                length=self.length, trials=self.trials, seed=self.seed,
            )  # fmt: skip
        recording = self.recorded[which]
        found = replay.replay(recording, rules, detection)
        interval = _interval(self.config, recording.substrate, which.split(" ")[-1])
        return evaluation.stationary_row(f"real: {which}", [found], len(recording), interval)


def _interval(config: Any, substrate: str, tier: str) -> float:
    """The shortest interval of the configured plans that probe `substrate` at `tier` (steps
    0): what a month of it holds. 5 minutes when no plan does."""
    found = [
        p.interval_s
        for p in config.plans
        if substrate in p.substrates and p.tier == tier and int(p.steps) == 0
    ]
    return min(found) if found else 300.0


def default_recording() -> Path:
    """The real series shipped with rtax (benchmarks/series/README.md)."""
    from rtax.core import paths

    return paths.checkout_root() / "benchmarks" / "series" / "recorded.csv.gz"
