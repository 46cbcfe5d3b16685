"""`make bench`: what rtax itself adds, measured side by side in one run.

Why side by side: the machines are noisy, so absolute timings mean little; rtax's cost is shown
as a difference and a ratio against a floor measured in the same run, interleaved in blocks so
that drift hits both equally. Two figures (docs/benchmarks.md):

1. per-action latency p50 of the local substrate through rtax (the probe runner's action samples)
   vs a bare ``subprocess.run`` of the same command in the same directory: the floor.
   Target: rtax adds at most 0.5 ms per action.
2. the ``overhead`` phase p50 per rollout (wall time minus the sum of phases: the harness's own
   cost). Target: at most 1 ms per rollout.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from pathlib import Path

from rtax.analysis import stats
from rtax.assets import attrs
from rtax.core.workloads import Action, Workload
from rtax.rollouts.rollout import run_rollout
from rtax.substrates.base import clock
from rtax.substrates.local import LocalSubstrate

sys.path.insert(0, str(Path(__file__).resolve().parent))
from report import Report, quiet  # a sibling script, not a package

COMMAND = "echo ok"
ACTION_TARGET_S = 0.0005
OVERHEAD_TARGET_S = 0.001


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--actions", type=int, default=600, help="actions per side (>= 500)")
    parser.add_argument("--block", type=int, default=50, help="actions per interleaved block")
    parser.add_argument("--rollouts", type=int, default=60, help="T0 rollouts for overhead")
    args = parser.parse_args()
    quiet()

    fixture = attrs.build()
    with tempfile.TemporaryDirectory(prefix="rtax-bench-") as tmp:
        local = LocalSubstrate(root=Path(tmp), template=fixture.template)
        block = Workload(
            "T0",
            0,
            0,
            actions=tuple(Action("exec", COMMAND, expect_stdout="ok") for _ in range(args.block)),
        )
        floor_dir = Path(tmp) / "floor"
        floor_dir.mkdir()
        env = local.command_env()  # the environment the substrate gives its commands

        through_rtax: list[float] = []
        floor: list[float] = []
        while len(through_rtax) < args.actions:
            record = run_rollout(local, block)
            if not record.ok:
                raise SystemExit(f"benchmark rollout failed: {record.run['error_message']}")
            through_rtax += [a["latency_s"] for a in record.actions if a["phase"] == "action"]
            for _ in range(args.block):
                t0 = clock()
                done = subprocess.run(
                    COMMAND,
                    shell=True,
                    cwd=floor_dir,
                    env=env,
                    stdin=subprocess.DEVNULL,
                    capture_output=True,
                )
                floor.append(clock() - t0)
                assert done.stdout == b"ok\n"

        overheads = []
        t0_workload = Workload("T0", 0, 0, actions=(Action("exec", COMMAND, expect_stdout="ok"),))
        for _ in range(args.rollouts):
            record = run_rollout(local, t0_workload)
            overheads.append(record.run["overhead_s"])

    rtax_p50 = stats.percentile(through_rtax, 50)
    floor_p50 = stats.percentile(floor, 50)
    diff = rtax_p50 - floor_p50
    overhead_p50 = stats.percentile(overheads, 50)
    report = Report("local")
    print(f"rtax bench (local substrate, command {COMMAND!r})")
    print(f"  per-action p50 through rtax  {rtax_p50 * 1e3:8.3f} ms  (n={len(through_rtax)})")
    print(
        f"  per-action p50 floor         {floor_p50 * 1e3:8.3f} ms  (n={len(floor)}, "
        "bare subprocess.run)"
    )
    report.target(
        "per-action cost",
        f"  difference                   {diff * 1e3:+8.3f} ms   ratio {rtax_p50 / floor_p50:.3f}x"
        f"   target <= +{ACTION_TARGET_S * 1e3:.1f} ms",
        diff <= ACTION_TARGET_S,
    )
    report.target(
        "overhead phase",
        f"  overhead phase p50/rollout   {overhead_p50 * 1e3:8.3f} ms  (n={len(overheads)} T0 "
        f"rollouts)   target <= {OVERHEAD_TARGET_S * 1e3:.0f} ms",
        overhead_p50 <= OVERHEAD_TARGET_S,
    )
    print(report.summary())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
