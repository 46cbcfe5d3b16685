"""`make bench` (comparability): the local floor against Docker, per action category, one run.

Why (docs/toolchain.md): the floor must be a floor. `local` and `docker` (session
mode) run the same trajectory (same seed, same length, same toolchain) in alternating rollouts,
so drift hits both sides alike; for every action category the floor's per-action p50 must be at
most 1.05 x Docker's. If it is not, the comparison is measuring something other than the
substrate (another program, another environment), and the dashboard's ratios would lie.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from collections import defaultdict
from pathlib import Path

from rtax.analysis import stats
from rtax.assets import attrs, toolchain
from rtax.assets.attrs import GitServer
from rtax.core.workloads import RepoSource, build, mix_counts
from rtax.rollouts.rollout import run_rollout
from rtax.substrates.docker.substrate import DockerSubstrate
from rtax.substrates.local import LocalSubstrate

sys.path.insert(0, str(Path(__file__).resolve().parent))
from report import Report, quiet  # a sibling script, not a package

TARGET = 1.05


def _source(fixture: attrs.Fixture, server: GitServer) -> RepoSource:
    return RepoSource(
        server.url(fixture.bare_repo.name),
        fixture.buggy_commit,
        fixture.fix_patch,
        fixture.failing_test,
    )


def _by_category(record) -> dict[str, list[float]]:
    if not record.ok:
        raise SystemExit(f"bench rollout failed: {record.run['error_message']}")
    out: dict[str, list[float]] = defaultdict(list)
    for row in record.actions:
        if row["phase"] == "action":
            out[row["category"]].append(row["latency_s"])
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=50, help="actions per trajectory")
    parser.add_argument("--rounds", type=int, default=8, help="rollouts per side, alternating")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--verbose", action="store_true", help="say what the set-up does")
    args = parser.parse_args()
    quiet()
    log = (lambda m: print(m, file=sys.stderr)) if args.verbose else (lambda m: None)

    fixture = attrs.build()
    samples: dict[str, dict[str, list[float]]] = {"local": defaultdict(list), "docker": {}}
    samples["docker"] = defaultdict(list)
    fingerprints = {}
    with tempfile.TemporaryDirectory(prefix="rtax-bench-floor-") as tmp:
        local = LocalSubstrate(root=Path(tmp), template=fixture.template)
        local.prepare(log)
        docker = DockerSubstrate(name="docker", mode="session")
        docker.prepare(log)
        with (
            GitServer(fixture.root, host="127.0.0.1") as local_git,
            GitServer(fixture.root, host=docker.host_address) as docker_git,
        ):
            sides = (
                (
                    "local",
                    local,
                    build(
                        "T2", steps=args.steps, seed=args.seed, source=_source(fixture, local_git)
                    ),
                ),
                (
                    "docker",
                    docker,
                    build(
                        "T2", steps=args.steps, seed=args.seed, source=_source(fixture, docker_git)
                    ),
                ),
            )
            for _ in range(args.rounds):
                for name, sub, workload in sides:
                    record = run_rollout(sub, workload)
                    for category, values in _by_category(record).items():
                        samples[name][category].extend(values)
                    fingerprints[name] = record.run["toolchain"]

    same = fingerprints["local"] == fingerprints["docker"]
    report = Report("floor")
    print(
        f"rtax bench (floor vs docker session, T2 S={args.steps} seed {args.seed}, "
        f"{args.rounds} rollouts each, alternating)"
    )
    report.target(
        "same toolchain",
        f"  toolchain: local {fingerprints['local']}  docker {fingerprints['docker']}  "
        f"(pins {toolchain.load().recipe})   target: the same",
        same,
    )
    for category in mix_counts(args.steps):
        lo, do = samples["local"][category], samples["docker"][category]
        if not lo or not do:
            continue
        ratio = stats.percentile(lo, 50) / stats.percentile(do, 50)
        report.target(
            category,
            f"  {category:<8} p50 local {stats.percentile(lo, 50) * 1e3:8.2f} ms (n={len(lo)})"
            f"  docker {stats.percentile(do, 50) * 1e3:8.2f} ms (n={len(do)})"
            f"  local/docker {ratio:5.2f}x   target <= {TARGET:.2f}x",
            ratio <= TARGET,
        )
    print(report.summary())
    return 0 if report.ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
