"""`make bench` (launch paths): cold, warm, restore and resume side by side on Docker and gVisor.

Why this shape (docs/benchmarks.md#launch-paths, docs/measurement.md#launch-paths):

1. Per runtime and path, T0 time to first command and T2 episode p50 (n each), and each path's
   ratio to cold: the four ways to a ready environment on one workload, one machine, one run.
2. Each path's rtax time to first command against an **independent timing** of the same engine
   calls made outside rtax with the raw SDK, interleaved pair by pair in a random order, so that
   drift hits both sides alike. Target <= 1.05x each: rtax may add no call of its own.
   - cold: create + start + one exec of ``true``;
   - warm: one exec of ``true`` on a container created and started beforehand;
   - restore: create from the snapshot's image + the checkpoint copied into the container's
     folder + start from it + one exec of ``true`` (the same snapshot rtax restores);
   - resume: unpause of a paused container + one exec of ``true``.
3. A fork of G environments from one snapshot at once against G cold creates at once and G warm
   claims at once: time to the first and to all G first commands.
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import sys
import threading
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import docker

from rtax.analysis import stats
from rtax.assets.image import RUNNER_IMAGE, ensure_runner
from rtax.compose import Composition
from rtax.core import workloads
from rtax.core.kinds import NAMED
from rtax.core.options import RolloutOptions
from rtax.core.workloads import Workload
from rtax.rollouts.rollout import run_rollout
from rtax.settings.pool import PoolSettings
from rtax.substrates.base import Substrate, clock
from rtax.substrates.docker.substrate import DockerSubstrate
from rtax.substrates.pool import WarmPool
from rtax.substrates.restore import Restorer

sys.path.insert(0, str(Path(__file__).resolve().parent))
from report import Report, quiet  # a sibling script, not a package

PATHS = ("cold", "warm", "restore", "resume")
NAME = "bench-paths"


def _p50(values: list[float]) -> float:
    return stats.percentile(values, 50)


def _substrate(gvisor: bool) -> DockerSubstrate:
    params = dict(NAMED["docker-gvisor"][1]) if gvisor else {}
    return DockerSubstrate(name=NAME, **params)


def _path(path: str, gvisor: bool) -> Substrate:
    inner = _substrate(gvisor)
    lifetime = 3600.0 + 120.0
    if path == "warm":
        return WarmPool(inner, PoolSettings(2, 1), rollout_lifetime_s=lifetime)
    if path == "resume":
        return WarmPool(inner, PoolSettings(2, 1), rollout_lifetime_s=lifetime, paused=True)
    if path == "restore":
        return Restorer(inner)
    return inner


def _rollout(sub: Substrate, workload: Workload) -> dict[str, Any]:
    record = run_rollout(sub, workload)
    if not record.ok:
        raise SystemExit(f"{sub.name} {workload.tier} failed: {record.run['error_message']}")
    return record.run


class Raw:
    """The independent side: the engine's calls through the raw SDK, nothing of rtax's."""

    def __init__(self, gvisor: bool) -> None:
        self.api = docker.APIClient(base_url=os.environ.get("DOCKER_HOST"))
        params = NAMED["docker-gvisor"][1] if gvisor else {}
        self.runtime = params.get("runtime")
        self.snapshot_runtime = params.get("snapshot_runtime") or self.runtime
        self.root = self.api.info()["DockerRootDir"]

    def _create(self, image: str, command: list[str], runtime: str | None, init: bool) -> str:
        host_config = self.api.create_host_config(
            nano_cpus=10**9, mem_limit="1g", network_mode="bridge", init=init, runtime=runtime
        )
        return self.api.create_container(
            image, command=command, host_config=host_config, working_dir="/work"
        )["Id"]

    def _true(self, cid: str) -> None:
        exec_id = self.api.exec_create(cid, ["true"], workdir="/work")["Id"]
        self.api.exec_start(exec_id)
        assert self.api.exec_inspect(exec_id)["ExitCode"] == 0

    def cold(self) -> tuple[float, str]:
        t0 = clock()
        cid = self._create(RUNNER_IMAGE, ["sleep", "infinity"], self.runtime, True)
        self.api.start(cid)
        self._true(cid)
        return clock() - t0, cid

    def running(self, paused: bool) -> str:
        cid = self._create(RUNNER_IMAGE, ["sleep", "infinity"], self.runtime, True)
        self.api.start(cid)
        self._true(cid)
        if paused:
            self.api.pause(cid)
        return cid

    def warm(self, cid: str) -> float:
        t0 = clock()
        self._true(cid)
        return clock() - t0

    def resume(self, cid: str) -> float:
        t0 = clock()
        self.api.unpause(cid)
        self._true(cid)
        return clock() - t0

    def restore(self, snap: dict[str, Any]) -> tuple[float, str]:
        t0 = clock()
        # (the command is the restored process's, from the checkpoint, whatever is given here)
        cid = self._create(snap["image"], ["sleep", "infinity"], self.snapshot_runtime, False)
        target = Path(self.root) / "containers" / cid / "checkpoints" / "rtax"
        shutil.copytree(Path(snap["dir"]) / "rtax", target, copy_function=_link)
        (target / "rtax-restore").write_text(uuid.uuid4().hex)
        response = self.api._post(
            self.api._url("/containers/{0}/start", cid), params={"checkpoint": "rtax"}
        )
        self.api._raise_for_status(response)
        self._true(cid)
        return clock() - t0, cid

    def remove(self, cid: str) -> None:
        self.api.remove_container(cid, force=True)


def _link(src: str, dst: str) -> None:
    try:
        os.link(src, dst)
    except OSError:
        shutil.copy2(src, dst)


def _side_by_side(
    n: int, rtax_side: Callable[[], float], raw_side: Callable[[], float], rng: random.Random
) -> tuple[list[float], list[float]]:
    ours: list[float] = []
    theirs: list[float] = []
    for _ in range(n):
        pair = [lambda: ours.append(rtax_side()), lambda: theirs.append(raw_side())]
        rng.shuffle(pair)
        for call in pair:
            call()
    return ours, theirs


def _raw_side(raw: Raw, path: str, sub: Substrate) -> Callable[[], float]:
    """The independent timing of `path`'s engine calls (see the module's doc)."""
    if path == "cold":

        def cold() -> float:
            took, cid = raw.cold()
            raw.remove(cid)
            return took

        return cold
    if path == "restore":
        snap = sub.snapshots["T0"]  # type: ignore[attr-defined]

        def restore() -> float:
            took, cid = raw.restore(snap)
            raw.remove(cid)
            return took

        return restore

    def running() -> float:
        cid = raw.running(paused=path == "resume")
        try:
            return raw.warm(cid) if path == "warm" else raw.resume(cid)
        finally:
            raw.remove(cid)

    return running


def _full(pool: WarmPool, deadline_s: float = 600.0) -> None:
    """Wait until `pool` is full with no refill in flight: a claim is then timed as the raw
    side's exec is, with nothing else on the engine (a claim beside a refill is slower, and
    its provenance says so: `refills_in_flight`)."""
    end = clock() + deadline_s
    while True:
        counts = pool.counts()
        if counts["ready"] == pool.settings.size and counts["in_flight"] == 0:
            return
        if clock() > end:
            raise SystemExit(f"the pool did not refill within {deadline_s:g} s: {counts}")
        threading.Event().wait(0.05)  # polling the pool with a deadline


def _bench_path(
    path: str, gvisor: bool, n: int, t2: Workload, report: Report, rng: random.Random
) -> float:
    """One path's T0 time to first command (against its independent timing) and T2 episode;
    returns the T0 p50."""
    label = "docker-gvisor" if gvisor else "docker"
    t0 = workloads.build("T0")
    sub = _path(path, gvisor)
    try:
        sub.prepare(lambda _: None)
        if path == "restore":
            _rollout(sub, t0)  # makes the snapshot, outside the figures
        raw_side = _raw_side(Raw(gvisor), path, sub)

        def ours_side() -> float:
            if isinstance(sub, WarmPool):
                _full(sub)
            return _rollout(sub, t0)["time_to_first_command_s"]

        ours, theirs = _side_by_side(n, ours_side, raw_side, rng)
        ratio = _p50(ours) / _p50(theirs)
        report.target(
            f"{label} {path} vs independent",
            f"  {path:<8} T0 ttfc {_p50(ours) * 1e3:8.1f} ms, independent "
            f"{_p50(theirs) * 1e3:8.1f} ms: {ratio:6.3f}x   target <= 1.05x",
            ratio <= 1.05,
        )
        support = getattr(sub, "inner", sub).snapshot_support if path == "restore" else None
        reason = support(True) if support else None
        if reason:
            print(f"  {path:<8} T2 episode: not supported ({reason})")
        else:
            episodes = [_rollout(sub, t2)["episode_s"] for _ in range(n)]
            print(f"  {path:<8} T2 episode p50 {_p50(episodes):7.3f} s (n={len(episodes)})")
        return _p50(ours)
    finally:
        sub.close()


def _bench_runtime(
    gvisor: bool, n: int, group: int, source: Any, report: Report, rng: random.Random
) -> None:
    label = "docker-gvisor" if gvisor else "docker"
    t2 = workloads.build("T2", source=source)
    print(f"\n{label}: T0 time to first command and T2 episode, p50 (n={n} each)")
    ttfc = {path: _bench_path(path, gvisor, n, t2, report, rng) for path in PATHS}
    for path in PATHS[1:]:
        print(f"  {path + ' / cold T0 ttfc':<28} {ttfc[path] / ttfc['cold']:7.3f}x")
    print(f"  fork of {group} at once: time to the first and to all {group} first commands")
    for path in ("cold", "warm", "restore"):
        done = _fork(path, gvisor, group)
        print(
            f"    {path:<8} first {min(done) * 1e3:8.1f} ms, all {max(done) * 1e3:8.1f} ms "
            f"(n={len(done)})"
        )


def _fork(path: str, gvisor: bool, group: int) -> list[float]:
    """`group` rollouts at once on `path` (restore: all from one snapshot; warm: a pool of
    `group`): each one's time from the group's start to its first command."""
    t0 = workloads.build("T0")
    sub = _path(path, gvisor)
    if isinstance(sub, WarmPool):
        sub = WarmPool(sub.inner, PoolSettings(group, group), rollout_lifetime_s=3600.0 + 120.0)
    done: list[float] = []
    failed: list[str] = []
    try:
        sub.prepare(lambda _: None)
        if path == "restore":
            _rollout(sub, t0)  # the snapshot, made once
        start = clock()

        def one() -> None:
            began: list[float] = []
            run = run_rollout(sub, t0, options=RolloutOptions(on_start=began.append)).run
            if run["status"] != "ok":  # a thread can't stop the run: said after the join
                failed.append(str(run["error_message"]))
            else:
                done.append(began[0] - start + run["time_to_first_command_s"])

        threads = [threading.Thread(target=one) for _ in range(group)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    finally:
        sub.close()
    if failed:
        raise SystemExit(f"fork of {group} on {path}: {len(failed)} failed: {failed[0]}")
    return done


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-n", type=int, default=20, help="samples per path and side")
    parser.add_argument("--group", type=int, default=8, help="environments forked at once")
    parser.add_argument("--only", choices=("docker", "docker-gvisor"), help="one runtime")
    args = parser.parse_args()
    quiet()
    try:
        image_id = ensure_runner(log=lambda _: None)
    except Exception as exc:  # no engine: say so, don't pretend
        print(f"paths bench skipped: {exc}")
        return 0
    print(f"rtax bench (launch paths, image {image_id[:19]})")
    report = Report("paths")
    rng = random.Random(0)
    with Composition() as compose:
        source = compose.source(_substrate(False))
        for gvisor in (False, True):
            if args.only and args.only != ("docker-gvisor" if gvisor else "docker"):
                continue
            _bench_runtime(gvisor, args.n, args.group, source, report, rng)
    print(report.summary())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
