"""`make bench` (dashboard part): each page's server-side render time, empty vs large database.

Why AppTest: it runs a page's script exactly as the server does, without a browser, so the time
is the server's. Every measurement starts with a cleared data cache (a cold render: the worst a
user sees). AppTest itself costs a fixed amount per run (it scans installed packages for
components); that cost is measured on a one-line page and printed, and the target (1.0 s) is
checked against the raw time, harness included. The large database is synthetic
(`benchmarks/synthetic.py`: 100,000 runs, ~2.3 M actions, marked synthetic and `modelled`),
made in a temporary folder and never in data/. Its copy "folded" has had every run older than
a day folded into rollups by retention (rtax.store.retention.fold): the same history, mostly rolled
up. The three databases are rendered in turn, page by page, so that machine noise hits them
alike.
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


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=100_000)
    parser.add_argument("--repeat", type=int, default=3, help="renders per page (median shown)")
    args = parser.parse_args()
    # AppTest renders pages outside a Streamlit server, and Streamlit says so ("No runtime
    # found", "missing ScriptRunContext") for every cached reader of every render: hundreds of
    # lines that would bury the figures.
    quiet()
    verdicts = Report("dashboard")
    with tempfile.TemporaryDirectory(prefix="rtax-bench-dash-") as tmp_name:
        tmp = Path(tmp_name)
        t0 = time.perf_counter()
        runs, actions = generate(tmp / "large.db", args.runs)
        print(
            f"rtax bench (dashboard): synthetic database of {runs:,} runs and {actions:,} "
            f"actions made in {time.perf_counter() - t0:.1f} s"
        )
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
    print(verdicts.summary())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
