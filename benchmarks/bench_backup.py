"""`make bench` (backup part): what `rtax backup` costs a writer that goes on writing.

Why (docs/data.md#backups): a backup of the live database must not pause probing. A synthetic
database (`benchmarks/synthetic.py`, in a temporary folder) is copied with `rtax.store.backup`
while a writer thread saves one rollout every 10 ms, as a busy scheduler would; printed: the
copy's size and time, and the writer's longest save during the copy beside its longest save
before it (the same writer, the same minute). Target: the longest save during the copy within
0.5 s (and never "database is locked"), whatever the copy's size.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import threading
import time
from pathlib import Path

from rtax.store.backup import backup
from rtax.store.database import Store

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))  # the tests' rows
sys.path.insert(0, str(Path(__file__).resolve().parent))  # sibling scripts, not a package
from report import Report
from synthetic import generate

from factories import make_record  # hand-made rows with every field, as the tests write them

#: A writer's longest save while the copy runs must stay within this (s).
TARGET_S = 0.5


def _writer(db: Path, stop: threading.Event, saves: list[tuple[float, float]]) -> None:
    """Save a rollout every 10 ms until `stop`: (when it started, how long it took) each."""
    with Store(db) as store:
        i = 0
        while not stop.is_set():
            t0 = time.monotonic()
            store.save_rollout(make_record(f"bench-backup-{i}", fidelity="modelled"))
            saves.append((t0, time.monotonic() - t0))
            i += 1
            stop.wait(0.01)  # paces the writer: one save per 10 ms, not a synchronisation


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=20_000, help="synthetic runs in the copy")
    args = parser.parse_args()
    report = Report("backup")
    with tempfile.TemporaryDirectory(prefix="rtax-bench-backup-") as tmp_name:
        tmp = Path(tmp_name)
        live = tmp / "live.db"
        runs, actions = generate(live, args.runs)
        stop, saves = threading.Event(), []
        writer = threading.Thread(target=_writer, args=(live, stop, saves), daemon=True)
        writer.start()
        time.sleep(2.0)  # two seconds of saves before the copy: the writer's own baseline
        began = time.monotonic()
        made = backup(live, tmp / "copy.db")
        ended = time.monotonic()
        time.sleep(1.0)  # and a second after it
        stop.set()
        writer.join(60)
    before = max((s for t, s in saves if t < began), default=float("nan"))
    during = max((s for t, s in saves if began <= t <= ended), default=0.0)
    count = sum(began <= t <= ended for t, _ in saves)
    print(f"rtax bench (backup): {runs:,} runs, {actions:,} actions")
    print(
        f"  copy: {made.bytes / 1e6:,.1f} MB in {made.seconds:.2f} s, {made.runs:,} runs, "
        f"integrity {made.integrity}"
    )
    report.target(
        "a writer's longest save during the copy",
        f"  writer: {count} saves during the copy, longest {during * 1e3:.1f} ms (before it: "
        f"{before * 1e3:.1f} ms)   target <= {TARGET_S * 1e3:.0f} ms",
        during <= TARGET_S,
    )
    print(report.summary())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
