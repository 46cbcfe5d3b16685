"""The restore launch path: rollouts on environments restored from a snapshot taken after set-up.

Why it is built this way (docs/measurement.md#launch-paths):

- A wrapper around any kind that can snapshot (`rtax.substrates.base.Snapshots`), like the warm
  pool: it speaks the whole substrate protocol, passed to the wrapped one, plus `Claims`, so the
  probe runner times the hand-over (the ``restore`` phase) without knowing any substrate.
- The snapshot is made before any rollout's clock starts (`prepare_for`), once per tier and
  image (its id and toolchain, from `describe`): a cold environment, the tier's set-up, its
  warm-up (`rtax.core.workloads.warmup`), then a state marker in two halves, a file and a value
  held in the memory of the environment's first process. It is remade when the image changes.
- Every restored environment proves it holds that state before its rollout goes on: its only
  set-up is the state check (`setup_of`), and a mismatch fails the rollout as
  ``restore_corrupt``, however fast the restore was. The tier's own set-up is in the snapshot.
- The check asks only for what the kind's snapshots keep
  (`rtax.substrates.base.snapshot_keeps_memory`): both halves after a checkpoint (Docker's),
  the file alone after a filesystem snapshot (Daytona's), whose restored processes start fresh.
  Which one ran is in every rollout's launch provenance (``state_check``: ``file+memory`` or
  ``file``), so a file-only row is never read as one that proved its memory.
- How long the snapshot took and what it holds on disk are measurements too: each is passed to
  `on_snapshot` (the store's snapshots table) and kept in the rollouts' provenance.
- A kind whose snapshot sources have no network (gVisor's checkpointable runtime) can still
  snapshot a set-up that fetches, if what it fetches is a folder of this host: `seed` says
  where the folder will be inside (`SEED_DIR`), the composition points the set-up there, and
  the folder is copied into the source (`rtax.substrates.base.CopiesIn`) before the set-up
  runs and removed after it, so the snapshot holds the set-up's result and not the copy.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import secrets
import shutil
import tempfile
import threading
import uuid
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from rtax.core.failures import (
    ClaimTimeout,
    NotSupported,
    RestoreCorrupt,
    SnapshotGone,
    SubstrateError,
)
from rtax.core.workloads import Action, Workload, warmup
from rtax.substrates import state
from rtax.substrates.base import (
    READY_COMMAND,
    CopiesIn,
    Environment,
    Snapshots,
    Substrate,
    clock,
    snapshot_keeps_memory,
)
from rtax.substrates.wrapper import Wrapper

log = logging.getLogger(__name__)

#: Run ids of the environments snapshots are made from (their labels let the reaper find them).
SNAPSHOT_RUN_PREFIX = "snapshot-"
#: What a restored environment's state check asks for (`state_check`), per what the kind's
#: snapshots keep: kept in each rollout's launch provenance as ``state_check``.
BOTH_HALVES = "file+memory"
FILE_ONLY = "file"
#: Where a snapshot source without a network finds the host folders its set-up reads (`seed`).
SEED_DIR = "/opt/rtax-seed"


class SnapshotFailed(SubstrateError):
    """A snapshot could not be made (its set-up, warm-up or the checkpoint failed): no restore
    rollout can run, and each says why."""

    error_class = "setup_error"


class Restorer(Wrapper):
    """Rollouts of `inner` restored from a snapshot of each tier (see the module's doc)."""

    #: the series of its rollouts (`rtax.substrates.base.Claims`)
    launch_type = "restore"

    def __init__(
        self,
        inner: Substrate,
        *,
        running_timeout_s: float = 300.0,
        ready_timeout_s: float = 120.0,
        ready_interval_s: float = 0.02,
        cleanup_timeout_s: float = 120.0,
        folder: Path | None = None,
        on_snapshot: Callable[[dict[str, Any]], None] | None = None,
        now: Callable[[], float] = clock,
    ) -> None:
        if not isinstance(inner, Snapshots):
            raise NotSupported(f"{inner.name} ({inner.kind}) can't snapshot its environments")
        self.inner = inner
        self.running_timeout_s = running_timeout_s
        self.ready_timeout_s = ready_timeout_s
        self.ready_interval_s = ready_interval_s
        self.cleanup_timeout_s = cleanup_timeout_s
        self._own_folder = folder is None
        self.folder = folder or Path(tempfile.mkdtemp(prefix="rtax-snapshots-", dir="/var/tmp"))
        self.on_snapshot = on_snapshot
        self.now = now
        self._lock = threading.Lock()
        #: tier key -> the snapshot now in use (what `Snapshots.snapshot` returned, and ours)
        self.snapshots: dict[str, dict[str, Any]] = {}
        #: run id -> the snapshot its rollout restores (`prepare_for` → `claim`, `setup_of`)
        self._for_run: dict[str, dict[str, Any]] = {}
        #: folder name -> the host folder copied into each snapshot source (`seed`); a lock
        #: of its own, as `_make` reads it while `_lock` is held
        self._seeds: dict[str, Path] = {}
        self._seeds_lock = threading.Lock()

    # -- the protocol, passed through (`Wrapper`), but for its description -----------------

    def describe(self) -> dict[str, Any]:
        return {**self.inner.describe(), "launch": "restore"}

    # -- the restore path ----------------------------------------------------------------------

    def prepare_for(self, workload: Workload, run_id: str) -> dict[str, Any]:
        """The snapshot the rollout `run_id` of `workload` restores, made first if this tier
        and image have none yet (outside any rollout's clock); what its provenance keeps."""
        snap = self.ensure(workload)
        with self._lock:
            self._for_run[run_id] = snap
        return {
            key: snap[key]
            for key in (
                "snapshot_id",
                "made_at",
                "snapshot_s",
                "size_bytes",
                "image",
                "state_check",
            )
        }

    def seed(self, folder: Path) -> str | None:
        """Where the snapshot sources will find `folder` (copied in before their set-up) when
        they can't reach the network but can be given files; None when they need no copy
        (they reach the network) or can't take one. A set-up that names the returned path
        reads the copy, and only then is it snapshotted without a network."""
        inner = self.inner
        if not isinstance(inner, CopiesIn):
            return None
        if inner.snapshot_support(True) is None or inner.snapshot_support(False) is not None:
            return None
        with self._seeds_lock:
            self._seeds[folder.name] = folder
        return f"{SEED_DIR}/{folder.name}"

    def ensure(self, workload: Workload) -> dict[str, Any]:
        """The snapshot of `workload`'s tier for the image in use, made now if there is none
        (a fork makes it before its group's clock starts)."""
        support = self.inner.snapshot_support(self._needs_network(workload))
        if support is not None:
            raise NotSupported(f"{self.name} can't restore {workload.tier}: {support}")
        described = self.inner.describe()
        toolchain = (described.get("toolchain") or {}).get("digest")
        key = _key(workload, described.get("image_id"), toolchain)
        with self._lock:
            snap = self.snapshots.get(workload.tier)
            if snap is None or snap["key"] != key:
                if snap is not None:  # the image or toolchain changed: remade
                    self._forget(snap, "replaced")
                snap = self._make(workload, key, described, toolchain)
                self.snapshots[workload.tier] = snap
        return snap

    def claim(self, run_id: str, *, lifetime_s: float, timeout_s: float) -> Environment:
        """A fresh environment restored from the snapshot `prepare_for` chose for `run_id`."""
        snap = self._for_run.get(run_id)
        if snap is None:
            raise ClaimTimeout(f"no snapshot was prepared for the rollout {run_id}")
        try:
            return self.inner.restore(snap, run_id, lifetime_s=lifetime_s)
        except SnapshotGone:
            with self._lock:  # the next rollout makes a new one (unless one was made since)
                if self.snapshots.get(snap["tier"]) is snap:
                    del self.snapshots[snap["tier"]]
                    self._forget(snap, "gone")
            raise

    def setup_of(self, env: Environment, setup: tuple[Action, ...]) -> tuple[Action, ...]:
        """Only the state check: the snapshot holds the tier's set-up."""
        snap = self._for_run.pop(env.run_id, None)
        if snap is None:
            return setup
        return (state_check(snap),)

    def close(self) -> None:
        """Remove every snapshot this path made (their rows stay), then close `inner`."""
        with self._lock:
            for snap in self.snapshots.values():
                self._forget(snap, "removed")
            self.snapshots.clear()
        if self._own_folder:
            shutil.rmtree(self.folder, ignore_errors=True)
        self.inner.close()

    # -- making and forgetting snapshots -------------------------------------------------------

    def _make(
        self, workload: Workload, key: str, described: dict[str, Any], toolchain: str | None
    ) -> dict[str, Any]:
        snapshot_id = uuid.uuid4().hex[:16]
        memory, file = secrets.token_hex(8), secrets.token_hex(8)
        keeps_memory = snapshot_keeps_memory(self.inner)
        made_at = datetime.now(UTC).isoformat(timespec="microseconds")
        lifetime = self.running_timeout_s + self.ready_timeout_s + 3600.0
        env = self.inner.snapshot_source(
            f"{SNAPSHOT_RUN_PREFIX}{snapshot_id}", token=memory, lifetime_s=lifetime
        )
        try:
            self._ready(env)
            seeded = self._seeded(workload)
            for folder in seeded:
                self.inner.copy_in(env, folder, SEED_DIR)  # type: ignore[attr-defined]
            t0 = self.now()
            for action in workload.setup:
                self._must(env, action, "set-up")
            t1 = self.now()
            if seeded:  # the set-up's result is the state, not the copy it read
                self._must(env, Action("setup", f"rm -rf {SEED_DIR}"), "seed removal")
            for action in warmup(workload):
                self._must(env, action, "warm-up")
            t2 = self.now()
            self._must(env, Action("mark", state.mark_command(file)), "state marker")
            t3 = self.now()
            taken = self.inner.snapshot(env, str(self.folder / snapshot_id))
            t4 = self.now()
        finally:
            try:
                self.inner.destroy(env, self.cleanup_timeout_s)
            except SubstrateError as exc:  # its labels let the reaper find it; said, not hidden
                log.warning("could not remove snapshot source %s: %s", env.env_id[:12], exc)
        snap = {
            **taken,
            "key": key,
            "snapshot_id": snapshot_id,
            "tier": workload.tier,
            "made_at": made_at,
            # a snapshot that keeps no memory holds no token to check: None, not a guess
            "memory_token": memory if keeps_memory else None,
            "file_token": file,
            "state_check": BOTH_HALVES if keeps_memory else FILE_ONLY,
            "setup_s": t1 - t0,
            "warmup_s": t2 - t1,
            "snapshot_s": t4 - t3,
            "seeded": [folder.name for folder in seeded],
        }
        if self.on_snapshot is not None:
            self.on_snapshot(
                {
                    "snapshot_id": snapshot_id,
                    "substrate": self.name,
                    "kind": self.kind,
                    "mode": self.mode,
                    "fidelity": self.fidelity,
                    "tier": workload.tier,
                    "toolchain": toolchain,
                    "image": described.get("image_id"),
                    "made_at": made_at,
                    "snapshot_s": snap["snapshot_s"],
                    "setup_s": snap["setup_s"],
                    "warmup_s": snap["warmup_s"],
                    "size_bytes": snap.get("size_bytes"),
                    "location": snap.get("dir"),
                    "state": "ready",
                }
            )
        return snap

    def _seeded(self, workload: Workload) -> list[Path]:
        """The seeded folders `workload`'s set-up reads (it names their path inside)."""
        with self._seeds_lock:
            seeds = dict(self._seeds)
        return [
            folder
            for name, folder in seeds.items()
            if any(f"{SEED_DIR}/{name}" in action.command for action in workload.setup)
        ]

    def _needs_network(self, workload: Workload) -> bool:
        """Whether some action of `workload`'s set-up fetches from outside: every action
        that reads no seeded folder is taken to."""
        with self._seeds_lock:
            names = list(self._seeds)
        return any(
            not any(f"{SEED_DIR}/{name}" in action.command for name in names)
            for action in workload.setup
        )

    def _ready(self, env: Environment) -> None:
        deadline = self.now() + self.ready_timeout_s
        while True:
            with contextlib.suppress(SubstrateError):
                if self.inner.run(env, READY_COMMAND, self.ready_timeout_s).exit_code == 0:
                    return
            if self.now() > deadline:
                raise SnapshotFailed(f"snapshot environment not ready in {self.ready_timeout_s} s")
            threading.Event().wait(self.ready_interval_s)  # the ready loop's pause

    def _must(self, env: Environment, action: Action, what: str) -> None:
        result = self.inner.run(env, action.command, action.timeout_s)
        problem = action.check(result.exit_code, result.stdout)
        if problem:
            tail = (result.stderr or result.stdout)[-400:]
            raise SnapshotFailed(f"snapshot {what} ({action.category}): {problem}: {tail}")

    def _forget(self, snap: dict[str, Any], state: str) -> None:
        try:
            self.inner.forget(snap)
        except Exception as exc:  # its files stay; the row says so
            log.warning("could not remove snapshot %s: %s", snap.get("snapshot_id"), exc)


def state_check(snap: dict[str, Any]) -> Action:
    """The set-up of a restored environment: the halves of the snapshot's state its kind keeps
    (both, or the file alone: ``snap["state_check"]``), or the rollout fails as
    ``restore_corrupt``."""
    if snap.get("state_check") == FILE_ONLY:
        command, expect = state.check_file_command(), state.expected_file(snap["file_token"])
    else:
        command = state.check_command()
        expect = state.expected(snap["file_token"], snap["memory_token"])
    return Action("check", command, expect_stdout=expect, timeout_s=60.0, failure=RestoreCorrupt)


def _key(workload: Workload, image_id: Any, toolchain: Any) -> str:
    """What a snapshot depends on: the tier's set-up, the image and its toolchain."""
    text = "\n".join([workload.tier, *(a.command for a in workload.setup), str(image_id)])
    return hashlib.sha256(f"{text}\n{toolchain}".encode()).hexdigest()[:16]
