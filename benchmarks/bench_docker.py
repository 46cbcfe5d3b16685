"""`make bench` (Docker part): rtax's Docker numbers against their floors, side by side in one run.

Why ratios measured together: machine noise moves absolute timings, not ratios taken in the same
minute with the work interleaved in blocks (docs/benchmarks.md). Printed:

1. exec-mode action p50 through rtax vs the raw SDK ``exec_run`` of the same shell command on a
   long-lived container. Target <= 1.05x.
2. session-mode action p50 vs exec-mode action p50. Target: session >= 20x faster.
3. time-to-first-command through rtax vs ``docker run --rm IMAGE true`` timed as a whole process.
   Target <= 1.0x.
4. all of them beside the local substrate's floor.
"""

from __future__ import annotations

import argparse
import random
import subprocess
import sys
import tempfile
from pathlib import Path

import docker

from rtax.analysis import stats
from rtax.assets import attrs
from rtax.assets.image import RUNNER_IMAGE, ensure_runner
from rtax.core.workloads import Action, Workload
from rtax.rollouts.rollout import run_rollout
from rtax.substrates.base import clock
from rtax.substrates.docker.substrate import DockerSubstrate
from rtax.substrates.local import LocalSubstrate

sys.path.insert(0, str(Path(__file__).resolve().parent))
from report import Report, quiet  # a sibling script, not a package

COMMAND = "echo ok"


def _actions(n: int) -> Workload:
    return Workload(
        "T0", 0, 0, actions=tuple(Action("exec", COMMAND, expect_stdout="ok") for _ in range(n))
    )


def _rollout(sub, workload: Workload) -> dict:
    record = run_rollout(sub, workload)
    if not record.ok:
        raise SystemExit(f"benchmark rollout on {sub.name} failed: {record.run['error_message']}")
    return {
        "actions": [a["latency_s"] for a in record.actions if a["phase"] == "action"],
        "ttfc": record.run["time_to_first_command_s"],
        "ttfc_and_cleanup": record.run["time_to_first_command_s"] + record.run["cleanup_s"],
    }


def _action_latencies(sub, workload: Workload) -> tuple[list[float], float]:
    result = _rollout(sub, workload)
    return result["actions"], result["ttfc"]


def _p50(values: list[float]) -> float:
    return stats.percentile(values, 50)


def _line(label: str, a: float, b: float, target: str) -> str:
    return f"  {label:<52} {a / b:7.3f}x   target {target}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--actions", type=int, default=300, help="actions per side")
    parser.add_argument("--block", type=int, default=50, help="actions per interleaved block")
    parser.add_argument("--starts", type=int, default=20, help="cold starts per side")
    parser.add_argument("--verbose", action="store_true", help="say what the set-up does")
    args = parser.parse_args()
    quiet()
    log = (lambda m: print(m, file=sys.stderr)) if args.verbose else (lambda m: None)

    try:
        image_id = ensure_runner(log=log)
    except Exception as exc:  # no engine: say so, don't pretend
        print(f"docker bench skipped: {exc}")
        return 0
    fixture = attrs.build()
    exec_sub, session_sub = DockerSubstrate(mode="exec"), DockerSubstrate(mode="session")
    client = docker.from_env()
    # Exec mode vs the raw SDK: one container made by rtax, and every rtax call paired with a
    # raw `exec_run` on the same container, in a random order per pair, so that drift and the
    # container's own state hit both sides alike. (The probe runner's own cost per action is
    # the local benchmark's subject: ~0.03 ms.)
    env = exec_sub.create("bench-exec")
    exec_lat: list[float] = []
    raw_lat: list[float] = []
    session_lat: list[float] = []
    rng = random.Random(0)
    try:
        exec_sub.wait_running(env, 60)
        raw = client.containers.get(env.env_id)

        def via_rtax() -> None:
            t0 = clock()
            result = exec_sub.run(env, COMMAND, 60)
            exec_lat.append(clock() - t0)
            assert result.exit_code == 0 and result.stdout == "ok\n"

        def via_sdk() -> None:
            t0 = clock()
            result = raw.exec_run(["/bin/sh", "-c", COMMAND], workdir="/work", demux=True)
            raw_lat.append(clock() - t0)
            assert result.exit_code == 0 and result.output[0] == b"ok\n"

        for _ in range(args.actions):
            pair = [via_rtax, via_sdk]
            rng.shuffle(pair)
            for call in pair:
                call()
    finally:
        exec_sub.destroy(env, 60)
    block = _actions(args.block)
    while len(session_lat) < args.actions:
        session_lat += _action_latencies(session_sub, block)[0]

    rtax_ttfc: list[float] = []
    rtax_with_removal: list[float] = []
    run_true: list[float] = []
    local_ttfc: list[float] = []
    one = _actions(1)
    with tempfile.TemporaryDirectory(prefix="rtax-bench-") as tmp:
        local = LocalSubstrate(root=Path(tmp), template=fixture.template)
        local_lat: list[float] = []
        for _ in range(args.starts):
            cold = _rollout(exec_sub, one)
            rtax_ttfc.append(cold["ttfc"])
            rtax_with_removal.append(cold["ttfc_and_cleanup"])
            t0 = clock()
            subprocess.run(
                ["docker", "run", "--rm", "--init", RUNNER_IMAGE, "true"],
                check=True,
                capture_output=True,
            )
            run_true.append(clock() - t0)
            lat, ttfc = _action_latencies(local, _actions(args.block))
            local_lat += lat
            local_ttfc.append(ttfc)

    e, r, s = _p50(exec_lat), _p50(raw_lat), _p50(session_lat)
    t, d, lo, lt = _p50(rtax_ttfc), _p50(run_true), _p50(local_lat), _p50(local_ttfc)
    print(f"rtax bench (docker, image {image_id[:19]}, command {COMMAND!r})")
    print(f"  exec-mode action p50 through rtax   {e * 1e3:9.3f} ms  (n={len(exec_lat)})")
    print(f"  raw SDK exec_run p50                {r * 1e3:9.3f} ms  (n={len(raw_lat)})")
    print(f"  session-mode action p50             {s * 1e3:9.3f} ms  (n={len(session_lat)})")
    print(f"  time-to-first-command p50 (rtax)    {t * 1e3:9.3f} ms  (n={len(rtax_ttfc)})")
    tr = _p50(rtax_with_removal)
    print(f"  ... plus cleanup (removal) p50      {tr * 1e3:9.3f} ms  (n={len(rtax_with_removal)})")
    print(f"  `docker run --rm IMAGE true` p50    {d * 1e3:9.3f} ms  (n={len(run_true)})")
    print(f"  local floor: action p50             {lo * 1e3:9.3f} ms  (n={len(local_lat)})")
    print(f"  local floor: time-to-first-command  {lt * 1e3:9.3f} ms  (n={len(local_ttfc)})")
    # `docker run --rm` also waits for the removal; this line compares like with like.
    print(
        f"  {'(ttfc + removal) rtax / docker run --rm true':<52} {tr / d:7.3f}x   "
        "(both include removal; for information)"
    )
    print(f"  {'exec action / local action':<52} {e / lo:7.1f}x")
    print(f"  {'session action / local action':<52} {s / lo:7.1f}x")
    print(f"  {'docker time-to-first-command / local':<52} {t / lt:7.1f}x")
    report = Report("docker")
    report.target(
        "exec action",
        _line("exec action through rtax / raw exec_run", e, r, "<= 1.05x"),
        e / r <= 1.05,
    )
    report.target(
        "session speed-up",
        _line("exec action / session action (session speed-up)", e, s, ">= 20x"),
        e / s >= 20,
    )
    report.target(
        "time to first command",
        _line("time-to-first-command rtax / docker run --rm true", t, d, "<= 1.0x"),
        t / d <= 1,
    )
    print(report.summary())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
