"""`make bench` (dashboard part): each page's server-side render time, empty vs large database.

Why AppTest: it runs a page's script exactly as the server does, without a browser, so the time
is the server's. Every measurement starts with a cleared data cache (a cold render: the worst a
user sees). AppTest itself costs a fixed amount per run (it scans installed packages for
components); that cost is measured on a one-line page and printed, and the target (1.5 s) is
checked against the raw time, harness included. The large database is synthetic
(`benchmarks/synthetic.py`: 100,000 runs, ~2.3 M actions, marked synthetic and `modelled`),
made in a temporary folder and never in data/.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import streamlit as st
from streamlit.testing.v1 import AppTest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from synthetic import generate  # a sibling script, not a package

ROOT = Path(__file__).resolve().parent.parent
PAGES = ("overview", "cold_start", "decomposition", "amortization", "projection", "data")
TARGET_S = 1.5


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
    with tempfile.TemporaryDirectory(prefix="rtax-bench-dash-") as tmp_name:
        tmp = Path(tmp_name)
        t0 = time.perf_counter()
        runs, actions = generate(tmp / "large.db", args.runs)
        print(
            f"rtax bench (dashboard): synthetic database of {runs:,} runs and {actions:,} "
            f"actions made in {time.perf_counter() - t0:.1f} s"
        )
        render(tmp / "empty.db", "overview")  # imports and first-run costs, not measured
        base = harness_cost(tmp)
        print(f"  AppTest's own cost per run (one-line page): {base:.2f} s, included below")
        print(f"  {'page':<15}{'empty db':>10}{'large db':>10}   target <= {TARGET_S} s")
        for page in PAGES:
            empty = statistics.median(render(tmp / "empty.db", page) for _ in range(args.repeat))
            large = statistics.median(render(tmp / "large.db", page) for _ in range(args.repeat))
            verdict = "meets target" if max(empty, large) <= TARGET_S else "MISSES target"
            print(f"  {page:<15}{empty:>9.2f}s{large:>9.2f}s   {verdict}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
