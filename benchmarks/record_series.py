"""Record the real series the detection evaluation replays (benchmarks/series/README.md).

Why a recorder of its own: the evaluation's real families must be what rtax measures on this
machine, not a distribution picked to suit a test. This runs rollouts the way the scheduler
does (one at a time, through `rtax.probe`, every rollout stored as it finishes) round robin over
the series, a batch of `--batch` rollouts of one series at a time, until every series holds at
least `--target` rollouts in `--db`; rerun, it goes on from what the database holds. Then
`--export` writes the compressed CSV the evaluation reads (one row per rollout, in order per
series, with the host's load average when it started).

    python benchmarks/record_series.py --db /tmp/series.db --target 2000
    python benchmarks/record_series.py --db /tmp/series.db \
        --export benchmarks/series/recorded.csv.gz
"""

from __future__ import annotations

import argparse
import gzip
import os
import sys
import time
from pathlib import Path

import rtax

SERIES: tuple[tuple[str, str], ...] = tuple(
    (substrate, tier) for tier in ("T0", "T2") for substrate in ("local", "docker", "docker-gvisor")
)
COLUMNS = (
    "series",
    "index",
    "started_at",
    "time_to_first_command_s",
    "episode_s",
    "status",
    "error_class",
    "loadavg_1m",
)


def counts(db: Path) -> dict[tuple[str, str], int]:
    if not db.exists():
        return dict.fromkeys(SERIES, 0)
    with rtax.open_store(db) as store:
        runs = store.runs.read(columns=("substrate", "tier", "steps", "mode"))
    return {
        (s, t): int(((runs["substrate"] == s) & (runs["tier"] == t) & (runs["steps"] == 0)).sum())
        for s, t in SERIES
    }


def record(db: Path, target: int, batch: int, only: tuple[str, ...] = ()) -> None:
    loads: dict[str, float] = {}
    sidecar = db.with_suffix(".loadavg")
    mine = [s for s in SERIES if not only or s[0] in only]
    while True:
        have = counts(db)
        todo = [s for s in mine if have[s] < target]
        if not todo:
            print(f"every series has >= {target} rollouts", flush=True)
            return
        for substrate, tier in todo:
            started = time.time()
            loads["before"] = os.getloadavg()[0]
            result = rtax.probe(rtax.Probe(substrate, tier=tier, repeat=batch, db=db))
            if result.interrupted is not None:  # Ctrl-C or SIGTERM: what was stored is kept
                raise SystemExit(f"interrupted; {db} keeps what it stored")
            with sidecar.open("a") as out:  # the host's load when each batch began
                for r in result.records:
                    out.write(f"{r.run['run_id']} {loads['before']:.2f}\n")
            print(
                f"{time.strftime('%H:%M:%S')} {substrate} {tier}: {have[(substrate, tier)]}"
                f" + {len(result.records)} ({result.failed} failed) in "
                f"{time.time() - started:.0f} s, load {loads['before']:.2f}",
                flush=True,
            )
            have[(substrate, tier)] += len(result.records)


def export(db: Path, out: Path) -> None:
    sidecar = db.with_suffix(".loadavg")
    load = {}
    if sidecar.exists():
        for line in sidecar.read_text().splitlines():
            run_id, value = line.split()
            load[run_id] = value
    with rtax.open_store(db) as store:
        runs = store.runs.read()
    runs = runs[runs["steps"] == 0].sort_values("started_at")
    out.parent.mkdir(parents=True, exist_ok=True)
    with gzip.open(out, "wt", newline="") as f:
        f.write(",".join(COLUMNS) + "\n")
        for (substrate, tier), group in runs.groupby(["substrate", "tier"], sort=True):
            for i, row in enumerate(group.to_dict("records")):
                values = [
                    f"{substrate} {tier}",
                    str(i),
                    row["started_at"],
                    _num(row["time_to_first_command_s"]),
                    _num(row["episode_s"]),
                    row["status"],
                    row["error_class"] or "",
                    load.get(row["run_id"], ""),
                ]
                f.write(",".join(values) + "\n")
    print(f"{len(runs)} rollouts -> {out} ({out.stat().st_size / 1024:.0f} KiB)")


def _num(value: object) -> str:
    try:
        number = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return ""
    return "" if number != number else f"{number:.6f}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--db", type=Path, required=True)
    parser.add_argument("--target", type=int, default=2000, help="rollouts per series")
    parser.add_argument("--batch", type=int, default=10, help="rollouts of a series in a row")
    parser.add_argument("--export", type=Path, help="write the CSV here instead of recording")
    parser.add_argument(
        "--only", action="append", default=[], help="record this substrate's series only"
    )
    args = parser.parse_args()
    if args.export:
        export(args.db, args.export)
    else:
        record(args.db, args.target, args.batch, tuple(args.only))
    return 0


if __name__ == "__main__":
    sys.exit(main())
