"""`python -m rtax.faultsuite --size full|ci`: run the fault suite, print its table, exit 1 on
any non-zero that must be zero (docs/faults.md)."""

from __future__ import annotations

import argparse
import logging
import signal
import sys

from rtax.faultsuite import scenario, suite, tally


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m rtax.faultsuite", description=__doc__)
    parser.add_argument("--size", choices=sorted(scenario.SIZES), default="full")
    parser.add_argument("--keep", action="store_true", help="keep the run's directory")
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=logging.INFO, stream=sys.stderr, format="%(asctime)s %(levelname)s %(message)s"
    )
    for noisy in ("streamlit", "urllib3", "botocore", "kubernetes", "httpx"):
        logging.getLogger(noisy).setLevel(logging.ERROR)
    # SIGTERM unwinds like Ctrl-C, so every engine, mount and emulation is cleaned up.
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    size = scenario.SIZES[args.size]
    from tqdm import tqdm

    # On a terminal a live bar; in a CI log a line every 30 s at most.
    every = 0.5 if sys.stderr.isatty() else 30.0
    bar = tqdm(
        total=size.target, desc=f"fault suite ({size.name})", unit="rollout", mininterval=every
    )

    def progress(done: int, next_fault: str) -> None:
        bar.set_postfix_str(f"next: {next_fault}", refresh=False)
        bar.update(min(done, size.target) - bar.n)  # drawn at most every `mininterval`

    try:
        outcome = suite.run(size, keep=args.keep, progress=progress)
    finally:
        bar.close()
    print(tally.table(outcome))
    return tally.exit_code(outcome)


if __name__ == "__main__":
    sys.exit(main())
