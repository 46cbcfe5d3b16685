"""`make bench` (launch paths): cold, warm, restore and resume side by side on Docker and gVisor.

Why this shape (docs/benchmarks.md#launch-paths, docs/measurement.md#launch-paths):

1. Per runtime and path, T0 time to first command and T2 episode p50 (n each), and each path's
   ratio to cold: the four ways to a ready environment on one workload, one machine, one run.
2. Each path's rtax time to first command against an **independent timing** of the same engine
   calls made outside rtax with the raw SDK, interleaved pair by pair in a random order, so that
   drift hits both sides alike. Target <= 1.05x each: rtax may add no call of its own.
   - cold: create + start + one exec of ``true``;
   - warm: one exec of ``true`` on a container created and started beforehand, while a
     replacement is created and started beside it, as the pool's refill starts at the claim
     (without it the raw side had the engine to itself and rtax's claim did not: 1.22x);
   - restore: create from the snapshot's image + the checkpoint copied into the container's
     folder + start from it + one exec of ``true`` (the same snapshot rtax restores);
   - resume: unpause of a paused container + one exec of ``true``, a paused replacement made
     beside it (the same refill).
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
from rtax.substrates import kit
from rtax.substrates.base import READY_COMMAND, Substrate, clock
from rtax.substrates.docker import snapshot
from rtax.substrates.docker.substrate import DockerSubstrate
from rtax.substrates.pool import WarmPool
from rtax.substrates.restore import Restorer

sys.path.insert(0, str(Path(__file__).resolve().parent))
from report import Report, quiet  # a sibling script, not a package

PATHS = ("cold", "warm", "restore", "resume")
NAME = "bench-paths"
#: The first command as rtax's ready phase runs it (`kit.timeout_argv`; the limit's digits
#: don't change what runs).
FIRST_COMMAND = kit.timeout_argv(READY_COMMAND, 60.0)


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
        #: Each restored container's marker, to remove containerd's copy of its checkpoint
        #: when it goes (untimed cleanup, as rtax's rollouts do in theirs).
        self.markers: dict[str, str] = {}

    def _create(self, image: str, command: list[str], runtime: str | None, init: bool) -> str:
        host_config = self.api.create_host_config(
            nano_cpus=10**9, mem_limit="1g", network_mode="bridge", init=init, runtime=runtime
        )
        return self.api.create_container(
            image, command=command, host_config=host_config, working_dir="/work"
        )["Id"]

    def _true(self, cid: str, argv: list[str] = FIRST_COMMAND) -> None:
        exec_id = self.api.exec_create(cid, argv, workdir="/work")["Id"]
        self.api.exec_start(exec_id)
        assert self.api.exec_inspect(exec_id)["ExitCode"] == 0

    def wrapper(self, n: int) -> tuple[list[float], list[float]]:
        """On one running container, `n` bare ``true`` execs and `n` wrapped ones, alternating:
        what rtax's command wrapper costs on this runtime (information, not a target)."""
        cid = self.running(paused=False)
        bare: list[float] = []
        wrapped: list[float] = []
        try:
            for _ in range(n):
                for argv, into in ((["true"], bare), (FIRST_COMMAND, wrapped)):
                    t0 = clock()
                    self._true(cid, argv)
                    into.append(clock() - t0)
        finally:
            self.remove(cid)
        return bare, wrapped

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

    def claimed(self, cid: str, paused: bool) -> tuple[float, str]:
        """A pool's claim of `cid` (thawed first when `paused`) to its first command, with
        the replacement the pool's refill makes starting as the claim does; the time and the
        replacement (removed by the caller, as the pool's close would)."""
        made: list[str] = []
        refill = threading.Thread(target=lambda: made.append(self.running(paused)))
        t0 = clock()
        refill.start()
        if paused:
            self.api.unpause(cid)
        self._true(cid)
        took = clock() - t0
        refill.join()
        return took, made[0]

    def restore(self, snap: dict[str, Any]) -> tuple[float, str]:
        t0 = clock()
        # (the command is the restored process's, from the checkpoint, whatever is given here)
        cid = self._create(snap["image"], ["sleep", "infinity"], self.snapshot_runtime, False)
        target = Path(self.root) / "containers" / cid / "checkpoints" / "rtax"
        shutil.copytree(Path(snap["dir"]) / "rtax", target, copy_function=_link)
        marker = uuid.uuid4().hex
        (target / snapshot.MARKER).write_text(marker)
        self.markers[cid] = marker
        response = self.api._post(
            self.api._url("/containers/{0}/start", cid), params={"checkpoint": "rtax"}
        )
        self.api._raise_for_status(response)
        self._true(cid)
        return clock() - t0, cid

    def remove(self, cid: str) -> None:
        self.api.remove_container(cid, force=True)
        if cid in self.markers:  # containerd keeps an unpacked copy of each restore's checkpoint
            snapshot.remove_unpacked(self.markers.pop(cid))


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


def _interval(
    ours: list[float], theirs: list[float], rng: random.Random, repeats: int = 2000
) -> tuple[float, float]:
    """A 95 % percentile-bootstrap interval of p50(ours) / p50(theirs), resampling the pairs
    together (each pair ran back to back, so drift is shared within it): how far the ratio
    moves between runs of this size. Two runs at n = 20 read docker warm 1.003x and 1.090x,
    gVisor restore 0.993x and 1.084x, with no change between them."""
    pairs = list(zip(ours, theirs, strict=True))
    ratios = []
    for _ in range(repeats):
        drawn = [pairs[rng.randrange(len(pairs))] for _ in pairs]
        ratios.append(_p50([a for a, _ in drawn]) / _p50([b for _, b in drawn]))
    return stats.percentile(ratios, 2.5), stats.percentile(ratios, 97.5)


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
            took, replacement = raw.claimed(cid, paused=path == "resume")
        finally:
            raw.remove(cid)
        if path == "resume":
            raw.api.unpause(replacement)  # runsc can't kill a frozen sandbox
        raw.remove(replacement)
        return took

    return running


def _full(pool: WarmPool, deadline_s: float = 600.0) -> None:
    """Wait until `pool` is full with no refill in flight: each claim then starts as the raw
    side's does, with one refill (its own slot's) beginning beside it and no other (a claim
    beside an earlier refill is slower still; its provenance says so: `refills_in_flight`)."""
    end = clock() + deadline_s
    while True:
        counts = pool.counts()
        if counts["ready"] == pool.settings.size and counts["in_flight"] == 0:
            return
        if clock() > end:
            raise SystemExit(f"the pool did not refill within {deadline_s:g} s: {counts}")
        threading.Event().wait(0.05)  # polling the pool with a deadline


def _bench_path(
    path: str,
    gvisor: bool,
    n: int,
    n_t2: int,
    compose: Composition,
    report: Report,
    rng: random.Random,
) -> float:
    """One path's T0 time to first command (against its independent timing) and T2 episode
    (its repository as the composition gives it to this path: gVisor's restore path clones a
    copy made inside its snapshot source); returns the T0 p50."""
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
        low, high = _interval(ours, theirs, rng)
        report.target(
            f"{label} {path} vs independent",
            f"  {path:<8} T0 ttfc {_p50(ours) * 1e3:8.1f} ms, independent "
            f"{_p50(theirs) * 1e3:8.1f} ms: {ratio:6.3f}x [{low:.3f}-{high:.3f}]  "
            "target <= 1.05x",
            ratio <= 1.05,
        )
        t2 = workloads.build("T2", source=compose.source(sub))
        episodes = [_rollout(sub, t2)["episode_s"] for _ in range(n_t2)]
        print(f"  {path:<8} T2 episode p50 {_p50(episodes):7.3f} s (n={len(episodes)})")
        return _p50(ours)
    finally:
        sub.close()


def _bench_runtime(
    gvisor: bool,
    n: int,
    n_t2: int,
    group: int,
    compose: Composition,
    report: Report,
    rng: random.Random,
) -> None:
    label = "docker-gvisor" if gvisor else "docker"
    print(
        f"\n{label}: T0 time to first command (p50 of n={n} pairs, the ratio's 95 % bootstrap "
        f"interval in brackets) and T2 episode (p50, n={n_t2})"
    )
    bare, wrapped = Raw(gvisor).wrapper(n)
    print(
        f"  the command wrapper: bare `true` {_p50(bare) * 1e3:.1f} ms, as rtax runs it "
        f"{_p50(wrapped) * 1e3:.1f} ms (p50, n={n}; on both sides below)"
    )
    ttfc = {path: _bench_path(path, gvisor, n, n_t2, compose, report, rng) for path in PATHS}
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
    parser.add_argument("-n", type=int, default=40, help="T0 pairs per path (rtax and independent)")
    parser.add_argument("--n-t2", type=int, default=20, help="T2 episodes per path")
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
    temp_dirs = snapshot.containerd_temp_dirs()
    before = set(snapshot.unpacked_copies(None, temp_dirs))
    with Composition() as compose:
        for gvisor in (False, True):
            if args.only and args.only != ("docker-gvisor" if gvisor else "docker"):
                continue
            _bench_runtime(gvisor, args.n, args.n_t2, args.group, compose, report, rng)
    # Every restore here, rtax's and the independent side's, removes containerd's copy of
    # its checkpoint (containerd#10166); one left behind is a leak the probes would repeat.
    left = set(snapshot.unpacked_copies(None, temp_dirs)) - before
    line = f"  containerd copies of restores left: {len(left)}"
    report.target("containerd copies", line, not left)
    print(report.summary())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
