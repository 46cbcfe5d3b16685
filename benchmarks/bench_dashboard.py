"""`make bench` (dashboard part): each page's server-side render time, empty vs large database.

Why AppTest: it runs a page's script exactly as the server does, without a browser, so the time
is the server's. Every measurement starts with a cleared data cache (a cold render: the worst a
user sees). AppTest itself costs a fixed amount per run (it scans installed packages for
components); that cost is measured on a one-line page and printed, and the target (1.0 s) is
checked against the raw time, harness included. The large database is synthetic
(`benchmarks/synthetic.py`: 100,000 runs, ~2.3 M actions, marked synthetic and `modelled`),
made in a temporary folder and never in data/; `BENCH_RUNS=1000000` (or ``--runs``) makes a
year of a million runs instead, ~23 M actions, ~6 GB. Its copy "folded" (up to `FOLDED_UP_TO`
runs) has had every run older than a day folded into rollups by retention
(rtax.store.retention.fold): the same history, mostly rolled up. The databases are rendered in
turn, page by page, so that machine noise hits them alike. Last, the write path: one rollout
saved into the large store against an empty one.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

import streamlit as st
from streamlit.testing.v1 import AppTest

from rtax.store import Store, retention

sys.path.insert(0, str(Path(__file__).resolve().parent))
from report import Report, quiet  # sibling scripts, not a package
from synthetic import generate

ROOT = Path(__file__).resolve().parent.parent
PAGES = (
    "overview",
    "timeline",
    "cold_start",
    "decomposition",
    "amortization",
    "projection",
    "capacity",
    "data",
    "paths",
)
TARGET_S = 1.0


def render(db: Path, page: str) -> float:
    os.environ["RTAX_DB"] = str(db)
    st.cache_data.clear()
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=120)
    at.switch_page(f"pages/{page}.py")
    t0 = time.perf_counter()
    at.run()
    elapsed = time.perf_counter() - t0
    if at.exception:
        raise SystemExit(f"{page} raised: {at.exception[0].value}")
    return elapsed


def harness_cost(tmp: Path) -> float:
    script = tmp / "one_line.py"
    script.write_text("import streamlit as st\nst.title('x')\n")
    times = []
    for _ in range(3):
        at = AppTest.from_file(str(script))
        t0 = time.perf_counter()
        at.run()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


#: Above this many runs the folded copy is left out: retention folding nearly a million runs
#: takes longer than the rest of the bench, and the 100,000-run size already judges it.
FOLDED_UP_TO = 200_000
#: Writing one rollout into the large store within this factor of writing it into an empty
#: one (issue 25): the summaries' merge must not grow with the history.
WRITE_RATIO_TARGET = 2.0
WRITES = 200


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=int(os.environ.get("BENCH_RUNS") or 100_000))
    parser.add_argument(
        "--days",
        type=float,
        default=None,
        help="the span the runs start over (default: 7 days up to 100,000 runs, a year above)",
    )
    parser.add_argument("--repeat", type=int, default=3, help="renders per page (median shown)")
    args = parser.parse_args()
    if args.runs < 1:
        parser.error("--runs must be at least 1")
    days = args.days or (7.0 if args.runs <= 100_000 else 365.0)
    # AppTest renders pages outside a Streamlit server, and Streamlit says so ("No runtime
    # found", "missing ScriptRunContext") for every cached reader of every render: hundreds of
    # lines that would bury the figures.
    quiet()
    verdicts = Report("dashboard")
    with tempfile.TemporaryDirectory(prefix="rtax-bench-dash-") as tmp_name:
        tmp = Path(tmp_name)
        t0 = time.perf_counter()
        runs, actions = generate(tmp / "large.db", args.runs, days=days)
        print(
            f"rtax bench (dashboard): synthetic database of {runs:,} runs and {actions:,} "
            f"actions over {days:g} days ({(tmp / 'large.db').stat().st_size / 1e9:.2f} GB) "
            f"made in {time.perf_counter() - t0:.1f} s"
        )
        dbs: tuple[str, ...] = ("empty", "large")
        if args.runs <= FOLDED_UP_TO:
            shutil.copy(tmp / "large.db", tmp / "folded.db")
            t0 = time.perf_counter()
            with Store(tmp / "folded.db") as store:
                report = retention.fold(store, older_than_days=1.0, pause_s=0.0)
                raw_left = store.runs.count()
            print(
                f"  folded: {report.runs:,} runs older than a day folded into rollups "
                f"({raw_left:,} raw runs left) in {time.perf_counter() - t0:.1f} s"
            )
            dbs = ("empty", "large", "folded")
        else:
            print(f"  folded: not made above {FOLDED_UP_TO:,} runs (the 100,000-run size has it)")
        render(tmp / "empty.db", "overview")  # imports and first-run costs, not measured
        base = harness_cost(tmp)
        print(f"  AppTest's own cost per run (one-line page): {base:.2f} s, included below")
        header = "".join(f"{name + ' db':>11}" for name in dbs)
        print(f"  {'page':<15}{header}   target <= {TARGET_S} s")
        for page in PAGES:
            times: dict[str, list[float]] = {name: [] for name in dbs}
            for _ in range(args.repeat):
                for name in dbs:
                    times[name].append(render(tmp / f"{name}.db", page))
            medians = [statistics.median(times[name]) for name in dbs]
            cells = "".join(f"{m:>10.2f}s" for m in medians)
            verdicts.target(page, f"  {page:<15}{cells}", max(medians) <= TARGET_S)
            if page == "projection":
                at_limits(tmp / "large.db", verdicts)
        write_path(tmp, verdicts)
    print(verdicts.summary())
    return 0


def write_path(tmp: Path, verdicts: Report) -> None:
    """One rollout written `WRITES` times into the large store and into an empty one,
    alternated one by one (machine noise hits both alike), each write timed through
    `Store.save_rollout` (run, actions and summary rows in one transaction). The rollout is the
    large store's own newest 50-step trajectory, given a new id and "now" as its start, so that
    on the large side it merges into the hour, day and month rows its series already has."""
    from rtax.core.record import RolloutRecord, utcnow

    with Store(tmp / "large.db", read_only=True) as store:
        run = store.runs.read(limit=1, newest_first=True, steps=50, status="ok")
        run_id = str(run["run_id"].iloc[0])
        actions = store.runs.actions(run_id=run_id).to_dict("records")
    template = run.iloc[0].to_dict()
    times: dict[str, list[float]] = {"empty": [], "large": []}
    stores = {"empty": Store(tmp / "writes.db"), "large": Store(tmp / "large.db")}
    try:
        for i in range(WRITES):
            for name, store in stores.items():
                new_id = f"bench-write-{name}-{i:04d}"
                record = RolloutRecord(
                    {**template, "run_id": new_id, "started_at": utcnow()},
                    [{**a, "run_id": new_id} for a in actions],
                )
                t0 = time.perf_counter()
                store.save_rollout(record)
                times[name].append(time.perf_counter() - t0)
    finally:
        for store in stores.values():
            store.close()
    empty, large = (statistics.median(times[n]) for n in ("empty", "large"))
    verdicts.target(
        "write path",
        f"  one rollout ({len(actions)} action rows) written into the large store "
        f"{large * 1e3:.2f} ms vs an empty one {empty * 1e3:.2f} ms (median of {WRITES} each, "
        f"alternated): {large / empty:.2f}x   target <= {WRITE_RATIO_TARGET:g}x",
        large <= WRITE_RATIO_TARGET * empty,
    )


#: The Projection's step-time inputs at their limits, moved one at a time (issue 24).
LIMITS = (
    ("proj_step_batch", 100_000),
    ("proj_step_group", 1_000),
    ("proj_step_oversample", 10.0),
    ("proj_step_retry", True),
)
#: A slider move must answer within this (server side, AppTest's own cost included) ...
MOVE_TARGET_S = 1.0
#: ... and the step time itself within this, at the limits, from a series' fit.
STEP_TARGET_S = 0.2


def at_limits(db: Path, verdicts: Report) -> None:
    """The Projection page moved to its input limits one input at a time, each move timed
    (the fit is cached after the first render, as on the server); and `step_time` at those
    limits timed directly on a fit of 3,000 samples, the most a series gives the page."""
    from rtax.planning import steptime

    os.environ["RTAX_DB"] = str(db)
    st.cache_data.clear()
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=120)
    at.switch_page("pages/projection.py")
    at.run()
    moves = []
    for key, value in LIMITS:
        widget = at.selectbox(key=key) if key == "proj_step_retry" else at.number_input(key=key)
        widget.set_value(value)
        t0 = time.perf_counter()
        at.run()
        moves.append(time.perf_counter() - t0)
        if at.exception:
            raise SystemExit(f"projection at {key} = {value} raised: {at.exception[0].value}")
    line = ", ".join(
        f"{k.removeprefix('proj_step_')} {t:.2f}s" for (k, _), t in zip(LIMITS, moves, strict=True)
    )
    verdicts.target(
        "projection at its limits",
        f"  projection, each step-time input moved to its limit: {line}   target <= "
        f"{MOVE_TARGET_S} s a move",
        max(moves) <= MOVE_TARGET_S,
    )
    import numpy as np

    fitted = steptime.fit(np.random.default_rng(0).lognormal(0.0, 0.5, 3_000))
    times = []
    for batch, group, over in ((100_000, 1_000, 0.0), (100_000, 1_000, 10.0), (32, 8, 0.0)):
        t0 = time.perf_counter()
        steptime.step_time(fitted, batch, group, oversample=over)
        times.append(time.perf_counter() - t0)
    verdicts.target(
        "step time at the limits",
        "  step_time from a fit (B·G 1e8, 1e8 of 1.1e9, 256): "
        + ", ".join(f"{t * 1000:.0f} ms" for t in times)
        + f"   target <= {STEP_TARGET_S} s",
        max(times) <= STEP_TARGET_S,
    )


if __name__ == "__main__":
    raise SystemExit(main())
