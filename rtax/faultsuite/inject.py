"""The faults themselves, each injected for real and counted only once it happened.

Why one place (docs/faults.md): a fault that was planned but never happened proves nothing, so
each injector returns how many times its fault really took effect (a container really paused or
killed, the engine really restarted, the disk really full), and the emulations' faults are
counted when the emulation takes them (`count_takes`), not when they are planted.
"""

from __future__ import annotations

import logging
import os
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from rtax.faultsuite.disk import SmallDisk
from rtax.faultsuite.dockerd import PrivateEngine
from rtax.faultsuite.scenario import LOST_ANSWER_S
from rtax.substrates.local import UNLABELLED_AFTER_S

log = logging.getLogger(__name__)

#: How long an injector waits for something to inject into (a running container, a rollout).
FIND_TIMEOUT_S = 90.0
#: How long the disk stays full at most: until this many rollouts finished, or this deadline.
DISK_FULL_ROLLOUTS = 3
DISK_FULL_MAX_S = 45.0
#: Faults the emulations count as they take them (planting is not injecting).
TAKEN = ("429 storm", "500 storm", "create failure", "lost create response")


def kind_of(fault: Any) -> str:
    """The suite's name for an emulation fault that was taken."""
    if not fault.failing:
        return "hung action" if fault.operation == "exec" else "lost create response"
    if fault.status == 429 or fault.code in ("RequestLimitExceeded", "ThrottlingException"):
        return "429 storm"
    if (
        fault.status is not None
        and fault.status >= 500
        and fault.code != "InsufficientInstanceCapacity"
    ):
        return "500 storm"
    return "create failure"


def count_takes(emulation: Any, counts: Counter[str], lock: threading.Lock) -> None:
    """Count every fault `emulation` takes, by kind (wrapping its `faults.take`)."""
    take = emulation.faults.take

    def counted(operation: str) -> Any:
        fault = take(operation)
        if fault is not None:
            with lock:
                counts[kind_of(fault)] += 1
        return fault

    emulation.faults.take = counted


class Injector:
    """Injects the suite's faults into a running scheduler, its engine, disk and emulations."""

    def __init__(
        self,
        engine: PrivateEngine,
        disk: SmallDisk,
        emulations: dict[str, Any],
        *,
        kill_scheduler: Callable[[], bool],
        finished: Callable[[], int],
        stopping: threading.Event,
        local_root: Path | None = None,
    ) -> None:
        self.engine = engine
        self.local_root = local_root
        self.disk = disk
        self.emulations = emulations
        self.kill_scheduler = kill_scheduler
        self.finished = finished
        self.stopping = stopping
        self.counts: Counter[str] = Counter()
        #: why a fault found nothing to inject into (printed under the table)
        self.misses: list[str] = []
        self.lock = threading.Lock()
        for emu in emulations.values():
            count_takes(emu, self.counts, self.lock)

    def inject(self, kind: str) -> None:
        action = {
            "429 storm": self.storm_429,
            "500 storm": self.storm_500,
            "create failure": self.create_failure,
            "lost create response": self.lost_response,
            "hung action": self.hung_action,
            "container killed mid-trajectory": self.kill_container,
            "dockerd restarted": self.restart_engine,
            "scheduler SIGKILL": self.sigkill,
            "disk full": self.disk_full,
            "half-made local environment": self.half_made_local,
        }[kind]
        try:
            done = action()
        except Exception as exc:  # an injector failing is said, and counts nothing
            log.warning("could not inject %s: %s: %s", kind, type(exc).__name__, exc)
            done = 0
        if done and kind not in (
            "429 storm",
            "500 storm",
            "create failure",
            "lost create response",
        ):
            with self.lock:
                self.counts[kind] += done
        log.info("fault %s: %s", kind, "injected" if done else "planted or not possible")

    # -- the emulations' faults (counted when taken) ----------------------------------------

    def storm_429(self) -> int:
        k8s, ec2, day = (self.emulations[k] for k in ("kubernetes", "ec2", "daytona"))
        k8s.faults.fail("create", 429, code="TooManyRequests", retry_after=1, times=4)
        ec2.faults.fail("RunInstances", code="RequestLimitExceeded", times=4)
        day.faults.fail("create", 429, message="Too many requests", retry_after=1, times=4)
        return 1

    def storm_500(self) -> int:
        k8s, ec2, day = (self.emulations[k] for k in ("kubernetes", "ec2", "daytona"))
        k8s.faults.fail("create", 500, code="InternalError", times=3)
        k8s.faults.fail("get", 500, code="InternalError", times=3)
        ec2.faults.fail("DescribeInstances", 500, code="InternalError", times=3)
        day.faults.fail("create", 500, message="Internal server error", times=3)
        return 1

    def create_failure(self) -> int:
        k8s, ec2, day = (self.emulations[k] for k in ("kubernetes", "ec2", "daytona"))
        k8s.faults.fail("create", 403, code="Forbidden", message="exceeded quota: pods")
        ec2.faults.fail("RunInstances", code="InsufficientInstanceCapacity")
        day.faults.fail("start", message="no runner available")
        return 1

    def lost_response(self) -> int:
        """Each cloud accepts a create and answers it after the client gave up."""
        k8s, ec2, day = (self.emulations[k] for k in ("kubernetes", "ec2", "daytona"))
        k8s.faults.delay("create", LOST_ANSWER_S)
        ec2.faults.delay("RunInstances", LOST_ANSWER_S)
        day.faults.delay("create", LOST_ANSWER_S)
        return 1

    def clear(self) -> None:
        for emu in self.emulations.values():
            emu.faults.clear()

    # -- the engine, the scheduler, the disk (counted when done) ----------------------------

    def _running(self, substrates: tuple[str, ...], min_age_s: float = 1.5) -> list[str]:
        """Running containers of `substrates` created at least `min_age_s` ago, oldest first
        (one `docker ps` per substrate: the window of a trajectory is a few seconds)."""
        found = []
        for name in substrates:
            listed = self.engine.docker(
                "ps",
                "--no-trunc",
                "--filter",
                f"label=rtax.substrate={name}",
                "--filter",
                "status=running",
                "--format",
                '{{.ID}} {{.Label "rtax.created_at"}}',
            )
            for line in listed.stdout.splitlines():
                cid, _, stamp = line.partition(" ")
                try:
                    created = datetime.fromisoformat(stamp.strip())
                except ValueError:
                    continue
                age = (datetime.now(UTC) - created).total_seconds()
                if age >= min_age_s:
                    found.append((age, cid))
        return [cid for _, cid in sorted(found, reverse=True)]

    def _missed(self, kind: str, why: str, substrates: tuple[str, ...]) -> None:
        """Say why a fault found nothing to inject into, with what the engine held meanwhile
        and how many rollouts finished while it waited: the suite's table says only "never
        injected", and a CI log is all there is to read afterwards."""
        seen = []
        for name in substrates:
            listed = self.engine.docker(
                "ps", "-a", "--filter", f"label=rtax.substrate={name}", "--format", "{{.Status}}"
            )
            seen += [f"{name}: {line}" for line in listed.stdout.splitlines()]
        note = (
            f"{kind}: {why} within {FIND_TIMEOUT_S:.0f} s ({self.finished()} rollouts finished "
            f"by then; the engine held {'; '.join(seen) or 'none of theirs'})"
        )
        log.warning(note)
        with self.lock:
            self.misses.append(note)

    def _wait_for(self, find: Callable[[], list[str]]) -> list[str]:
        deadline = time.monotonic() + FIND_TIMEOUT_S
        while not self.stopping.is_set() and time.monotonic() < deadline:
            found = find()
            if found:
                return found
            self.stopping.wait(0.2)  # polling the engine for a target, with a deadline
        return []

    def kill_container(self) -> int:
        """`docker kill` of a container some seconds into its rollout (a trajectory: T0 ones
        are gone within a second)."""
        for cid in self._wait_for(lambda: self._running(("docker", "docker-gvisor"), 2.0)):
            killed = self.engine.docker("kill", cid)
            if killed.returncode == 0:
                return 1
            log.warning("docker kill %s: %s", cid[:12], killed.stderr.strip())
        self._missed(
            "container killed mid-trajectory",
            "no container running >= 2 s to kill",
            ("docker", "docker-gvisor"),
        )
        return 0

    def hung_action(self) -> int:
        """A command that never answers: a runc container frozen (`docker pause`) mid-
        trajectory, and a Kubernetes exec whose upgrade is never answered."""
        self.emulations["kubernetes"].faults.delay("exec", 600)
        for cid in self._wait_for(lambda: self._running(("docker",), 1.0)):
            paused = self.engine.docker("pause", cid)
            if paused.returncode == 0:
                return 1
            log.warning("docker pause %s: %s", cid[:12], paused.stderr.strip())
        self._missed("hung action", "no runc container running >= 1 s to pause", ("docker",))
        return 0

    def restart_engine(self) -> int:
        self._wait_for(lambda: self._running(("docker", "docker-gvisor"), 0.5))
        self.engine.restart()
        return 1

    def sigkill(self) -> int:
        """SIGKILL of the scheduler while one of its rollouts holds an environment."""
        self._wait_for(lambda: self._running(("docker", "docker-gvisor"), 0.5))
        return 1 if self.kill_scheduler() else 0

    def half_made_local(self) -> int:
        """What an rtax killed between making a local environment's folder and labelling it
        leaves (the full suite's leak of issue 25): a folder named as an environment, files in
        it, no label, untouched for longer than the reaper waits. Planted rather than caught:
        the moment is microseconds wide, and the suite must show every time that the reaper
        removes it (the leak count would say 1 otherwise)."""
        if self.local_root is None:
            return 0
        folder = self.local_root / f"rtax-{uuid.uuid4().hex}"
        (folder / "repo").mkdir(parents=True)
        (folder / "repo" / "README").write_text("made half-way\n")
        then = time.time() - 2 * UNLABELLED_AFTER_S
        for path in (folder / "repo" / "README", folder / "repo", folder):
            os.utime(path, (then, then))
        return 1

    def disk_full(self) -> int:
        """Fill the database's disk, keep it full for a few rollouts, free it."""
        self.disk.fill()
        if not self.disk.full():
            self.disk.free()
            return 0
        start, deadline = self.finished(), time.monotonic() + DISK_FULL_MAX_S
        while self.finished() < start + DISK_FULL_ROLLOUTS and time.monotonic() < deadline:
            if self.stopping.wait(0.2):  # polling progress, with a deadline
                break
        self.disk.free()
        return 1
