"""The sandboxes: their API records, their states and events, and the containers behind them.

Why (docs/emulations.md): every sandbox is a real container of the runner image made by a
`DockerSubstrate` named ``daytona-emulation`` (so the reaper finds a dead process's orphans);
states move creating -> started (after the container runs) and destroying -> destroyed (after it
is removed), with an event on each transition, which is what the SDK waits on. Provisioning and
removal run on a worker pool, apart from the server's loop.

What the SDK's other sandbox calls do here, each backed by the engine's own operation:

- ``create_snapshot``: started -> snapshotting -> started around a ``docker commit`` of the
  container (`rtax.emulation.daytona.snapshots`): the files, never the memory.
- ``fork``: the source goes started -> forking -> started around a commit, and a new sandbox
  (creating -> started) runs from that image, removed with the fork.
- ``pause``: started -> pausing -> paused around ``docker pause`` (the cgroup freezer: its
  processes stop, its memory stays); ``start`` of a paused sandbox: paused -> resuming ->
  started around ``docker unpause``. A paused sandbox is thawed before its removal (a forced
  removal of a frozen container waits out the engine's kill timeout, or fails on gVisor).
"""

from __future__ import annotations

import contextlib
import json
import threading
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from rtax.core.failures import SubstrateError
from rtax.emulation.backing import remove as remove_backing
from rtax.emulation.daytona.api import ORGANIZATION_ID, HttpError
from rtax.emulation.daytona.snapshots import SnapshotStore, commit_image
from rtax.emulation.faults import Fault, Faults
from rtax.substrates.base import Environment, clock

BACKING_NAME = "daytona-emulation"


@dataclass
class Sandbox:
    """One emulated sandbox: its API record and the container behind it."""

    id: str
    name: str
    body: dict[str, Any]
    image: str
    state: str = "creating"
    error_reason: str | None = None
    env: Environment | None = None
    created_at: str = field(default_factory=lambda: datetime.now(UTC).isoformat())
    sessions: dict[str, Any] = field(default_factory=dict)  # id -> toolbox.Session
    #: its container is paused now (``docker pause``): thawed before it is removed
    frozen: bool = False
    #: an image committed for this sandbox alone (a fork's), removed with it
    own_image: str | None = None
    #: held while the container is being made or removed (delete waits for a start in progress)
    lock: threading.Lock = field(default_factory=threading.Lock)


class Sandboxes:
    """The sandboxes of one emulation. `emit(event, payload)` sends an event to the
    organization's socket.io room; `toolbox_url()` is where the toolbox is served; `faults`
    is the emulation's (its ``start`` operation)."""

    def __init__(
        self,
        image: str,
        snapshots: dict[str, str],
        faults: Faults,
        emit: Callable[[str, Any], None],
        toolbox_url: Callable[[], str],
    ) -> None:
        self.image = image
        self.snapshots = snapshots
        #: the snapshots, configured and made from sandboxes (the create's map is `snapshots`)
        self.store = SnapshotStore(snapshots)
        self.faults = faults
        self.by_id: dict[str, Sandbox] = {}
        #: the JSON body of every create request, for tests (labels, intervals)
        self.create_bodies: list[dict[str, Any]] = []
        #: sandbox name -> id of every sandbox made (kept after deletion), for tests
        self.ids_by_name: dict[str, str] = {}
        #: (event name, sandbox id, new state or None, clock time) of every event emitted
        self.events: list[tuple[str, str, str | None, float]] = []
        self.backing: Any = None
        self.pool: ThreadPoolExecutor | None = None
        self._emit_to_room = emit
        self._toolbox_url = toolbox_url
        self._lock = threading.Lock()
        self._made: set[str] = set()  # container ids made by this emulation
        #: image -> the backing substrate creating its containers (one client per image)
        self._backings: dict[str, Any] = {}

    def start(self) -> None:
        """Reap dead runs' backing containers (a live process's are kept); start the pool."""
        from rtax.substrates import reaper
        from rtax.substrates.docker.substrate import DockerSubstrate

        self.backing = DockerSubstrate(name=BACKING_NAME, image=self.image)
        reaper.reap([self.backing])
        self.store.reap_dead(self.backing.api)  # after the containers: their images are free
        self.pool = ThreadPoolExecutor(max_workers=32, thread_name_prefix="daytona-emu")

    def stop(self) -> None:
        """Wait for the work in progress, then remove every container made, then every image
        committed (snapshots' and forks'): nothing of this emulation outlives it."""
        if self.pool is not None:
            self.pool.shutdown(wait=True)
            self.pool = None
        for sandbox in list(self.by_id.values()):
            with sandbox.lock:
                self.remove_container(sandbox)
        if self.backing is not None:
            for leftover in self.backing.leftovers():
                if leftover.env_id in self._made:
                    self.backing.destroy(leftover, 60)
            self.store.close(self.backing.api)
        for backing in self._backings.values():
            backing.close()
        self._backings.clear()
        self.by_id.clear()

    # -- the API's view ----------------------------------------------------------------------

    def dto(self, sandbox: Sandbox) -> dict[str, Any]:
        body = sandbox.body
        return {
            "id": sandbox.id,
            "organizationId": ORGANIZATION_ID,
            "name": sandbox.name,
            "snapshot": body.get("snapshot"),
            "user": body.get("user") or "root",
            "env": body.get("env") or {},
            "labels": body.get("labels") or {},
            "public": bool(body.get("public")),
            "networkBlockAll": bool(body.get("networkBlockAll")),
            "kvm": False,
            "target": body.get("target") or "emulated",
            "cpu": body.get("cpu") or 1,
            "gpu": 0,
            "memory": body.get("memory") or 1,
            "disk": body.get("disk") or 3,
            "state": sandbox.state,
            "desiredState": _desired(sandbox.state),
            "errorReason": sandbox.error_reason,
            "recoverable": False,
            "autoStopInterval": body.get("autoStopInterval", 15),
            "autoArchiveInterval": body.get("autoArchiveInterval", 10080),
            "autoDeleteInterval": body.get("autoDeleteInterval", -1),
            "createdAt": sandbox.created_at,
            "updatedAt": datetime.now(UTC).isoformat(),
            "toolboxProxyUrl": self._toolbox_url(),
        }

    def find(self, ref: str) -> Sandbox:
        """A sandbox by id or name, else the API's 404."""
        sandbox = self.by_id.get(ref)
        if sandbox is None:
            # list(): provisioning and deletion threads change the dict meanwhile
            sandbox = next((s for s in list(self.by_id.values()) if s.name == ref), None)
        if sandbox is None:
            raise HttpError(404, f"Sandbox with ID or name {ref} not found")
        return sandbox

    def running(self, sandbox_id: str) -> Sandbox:
        """A started sandbox with its container, else the toolbox's 400."""
        sandbox = self.find(sandbox_id)
        if sandbox.state != "started" or sandbox.env is None:
            raise HttpError(400, f"Sandbox {sandbox_id} is not started (state {sandbox.state})")
        return sandbox

    def matching(self, labels_json: str | None) -> list[dict[str, Any]]:
        """The records of the live sandboxes carrying every label of `labels_json`."""
        wanted = json.loads(labels_json) if labels_json else {}
        return [
            self.dto(s)
            for s in list(self.by_id.values())
            if s.state != "destroyed"
            and all((s.body.get("labels") or {}).get(k) == v for k, v in wanted.items())
        ]

    # -- life of a sandbox -------------------------------------------------------------------

    def create(self, body: dict[str, Any]) -> Sandbox:
        self.create_bodies.append(body)
        if body.get("snapshot"):
            image = self.store.image_of(body["snapshot"])
        elif body.get("buildInfo"):
            lines = (body["buildInfo"].get("dockerfileContent") or "").strip().splitlines()
            if len(lines) != 1 or not lines[0].startswith("FROM "):
                raise HttpError(400, "the emulation builds only a bare 'FROM <image>'")
            image = lines[0].split()[1]
        else:
            image = self.image
        sandbox_id = str(uuid.uuid4())
        name = body.get("name") or sandbox_id
        if any(s.name == name for s in list(self.by_id.values())):
            raise HttpError(409, f"Sandbox with name {name} already exists")
        sandbox = Sandbox(id=sandbox_id, name=name, body=body, image=image)
        self.ids_by_name[name] = sandbox_id
        with self._lock:
            self.by_id[sandbox_id] = sandbox
            fault = self.faults.take("start")
        self._emit("sandbox.created", sandbox, None)
        assert self.pool is not None
        self.pool.submit(self._provision, sandbox, fault)
        return sandbox

    def delete(self, ref: str) -> Sandbox:
        sandbox = self.find(ref)
        if sandbox.state not in ("destroying", "destroyed"):
            self.transition(sandbox, "destroying")
            assert self.pool is not None
            self.pool.submit(self._destroy, sandbox)
        return sandbox

    def set_error(self, sandbox_id: str, reason: str) -> None:
        """A started sandbox breaks: its container is removed and it enters state ``error``."""
        sandbox = self.by_id[sandbox_id]
        with sandbox.lock:
            self.remove_container(sandbox)
            sandbox.error_reason = reason
            self.transition(sandbox, "error")

    def remove_container(self, sandbox: Sandbox) -> None:
        """Remove the sandbox's container (thawed first if paused), then the image committed
        for it alone, if any, and any snapshot image no container holds any more."""
        for session in sandbox.sessions.values():
            session.shell.close()
        sandbox.sessions.clear()
        if sandbox.env is not None:
            if sandbox.frozen:
                with contextlib.suppress(SubstrateError):  # then the removal says what is wrong
                    self.backing.unpause(sandbox.env)
                sandbox.frozen = False
            remove_backing(self.backing, sandbox.env)
            sandbox.env = None
        if sandbox.own_image is not None:
            self.store.discard(sandbox.own_image)
            sandbox.own_image = None
        self.store.sweep(self.backing.api)

    # -- snapshots, forks, pauses ------------------------------------------------------------

    def snapshot(self, ref: str, name: str) -> Sandbox:
        """``POST /sandbox/{ref}/snapshot``: a started sandbox goes snapshotting while its
        container is committed (in the background), then back to started; the snapshot is
        active (or in error) before that last transition, which is what the SDK waits for."""
        sandbox = self._started(ref, "snapshot")
        snap = self.store.begin(name, sandbox.id)
        self.transition(sandbox, "snapshotting")
        fault = self.faults.take("snapshot")
        assert self.pool is not None
        self.pool.submit(self._snapshot, sandbox, snap, fault)
        return sandbox

    def fork(self, ref: str, name: str | None) -> Sandbox:
        """``POST /sandbox/{ref}/fork``: a new sandbox (its record answered at once, creating)
        from a commit of the source's container, the source forking meanwhile."""
        source = self._started(ref, "fork")
        name = name or f"{source.name}-fork-{uuid.uuid4().hex[:8]}"
        if any(s.name == name for s in list(self.by_id.values())):
            raise HttpError(409, f"Sandbox with name {name} already exists")
        body = {**source.body, "name": name}
        forked = Sandbox(id=str(uuid.uuid4()), name=name, body=body, image="")
        self.ids_by_name[name] = forked.id
        with self._lock:
            self.by_id[forked.id] = forked
            fault = self.faults.take("start")
        self.transition(source, "forking")
        self._emit("sandbox.created", forked, None)
        assert self.pool is not None
        self.pool.submit(self._fork, source, forked, fault)
        return forked

    def pause(self, ref: str) -> Sandbox:
        """``POST /sandbox/{ref}/pause``: started -> pausing -> paused (``docker pause``)."""
        sandbox = self._started(ref, "pause")
        self.transition(sandbox, "pausing")
        assert self.pool is not None
        self.pool.submit(self._freeze, sandbox)
        return sandbox

    def start_sandbox(self, ref: str) -> Sandbox:
        """``POST /sandbox/{ref}/start``: a paused sandbox goes resuming -> started
        (``docker unpause``); a started one is answered as it is. The emulation models no stop,
        so no other state can be started."""
        sandbox = self.find(ref)
        if sandbox.state == "started":
            return sandbox
        if sandbox.state != "paused":
            raise HttpError(400, f"Sandbox {ref} can't be started from state {sandbox.state}")
        self.transition(sandbox, "resuming")
        assert self.pool is not None
        self.pool.submit(self._thaw, sandbox)
        return sandbox

    def _started(self, ref: str, what: str) -> Sandbox:
        sandbox = self.find(ref)
        if sandbox.state != "started" or sandbox.env is None:
            raise HttpError(400, f"Sandbox {ref} can't {what} in state {sandbox.state}")
        return sandbox

    def _snapshot(self, sandbox: Sandbox, snap: Any, fault: Fault | None) -> None:
        with sandbox.lock:
            if fault is not None:
                self.faults.wait(fault.delay_s)  # committing takes that long
            if fault is not None and fault.failing:
                self.store.fail(snap, fault.message)
            elif sandbox.env is None:
                self.store.fail(snap, f"sandbox {sandbox.id} has no container")
            else:
                self.store.commit(self.backing.api, sandbox.env.env_id, snap)
                self.store.sweep(self.backing.api)  # a snapshot deleted while committed
            if sandbox.state == "snapshotting":
                self.transition(sandbox, "started")

    def _fork(self, source: Sandbox, forked: Sandbox, fault: Fault | None) -> None:
        with source.lock:
            try:
                if source.env is None:
                    raise SubstrateError(f"sandbox {source.id} has no container")
                image, _ = commit_image(self.backing.api, source.env.env_id, forked.id)
            except Exception as exc:  # the engine's reason is the fork's errorReason
                image = None
                forked.error_reason = f"fork failed: {exc}"
            if source.state == "forking":
                self.transition(source, "started")
        if image is None:
            self.transition(forked, "error")
            return
        with forked.lock:
            if forked.state != "creating":  # deleted while its image was committed
                self.store.discard(image)
                self.store.sweep(self.backing.api)
                return
            forked.image = forked.own_image = image
        self._provision(forked, fault)

    def _freeze(self, sandbox: Sandbox) -> None:
        self._freezer(sandbox, "pausing", self.backing.pause, "pause", frozen=True, then="paused")

    def _thaw(self, sandbox: Sandbox) -> None:
        self._freezer(
            sandbox, "resuming", self.backing.unpause, "start", frozen=False, then="started"
        )

    def _freezer(
        self,
        sandbox: Sandbox,
        moving: str,
        call: Any,
        what: str,
        *,
        frozen: bool,
        then: str,
    ) -> None:
        """The pause or the start of a paused sandbox: `call` on its container while it is
        `moving`, then the state `then`; a refusal is the sandbox's error state, with why."""
        with sandbox.lock:
            if sandbox.state != moving or sandbox.env is None:
                return  # deleted meanwhile
            try:
                call(sandbox.env)
            except SubstrateError as exc:
                sandbox.error_reason = f"{what} failed: {exc}"
                self.transition(sandbox, "error")
                return
            sandbox.frozen = frozen
            self.transition(sandbox, then)

    def transition(self, sandbox: Sandbox, state: str) -> None:
        old, sandbox.state = sandbox.state, state
        self._emit("sandbox.state.updated", sandbox, old)

    def _provision(self, sandbox: Sandbox, fault: Fault | None) -> None:
        """creating -> started once the container runs; -> error if it can't, or if a
        ``start`` fault says so (after its delay: provisioning time)."""
        with sandbox.lock:
            if sandbox.state != "creating":
                return  # deleted before it started
            if fault is not None:
                self.faults.wait(fault.delay_s)  # provisioning takes that long
            if sandbox.state != "creating":
                return  # deleted while provisioning: it must not come back as started
            if fault is not None and fault.failing:
                sandbox.error_reason = fault.message
                self.transition(sandbox, "error")
                return
            try:
                backing = self._backing_for(sandbox.image)
                sandbox.env = backing.create(sandbox.id)
                self._made.add(sandbox.env.env_id)
                backing.wait_running(sandbox.env, 120)
            except SubstrateError as exc:
                sandbox.error_reason = f"{type(exc).__name__}: {exc}"
                self.transition(sandbox, "error")
                return
            if sandbox.state == "creating":  # not deleted while its container was made
                self.transition(sandbox, "started")

    def _backing_for(self, image: str) -> Any:
        """The substrate that creates containers of `image`: the emulation's own for the runner
        image, else one per image (a snapshot's, a build's), made once, closed at `stop`."""
        from rtax.substrates.docker.substrate import DockerSubstrate

        if image == self.image:
            return self.backing
        with self._lock:
            backing = self._backings.get(image)
            if backing is None:
                backing = self._backings[image] = DockerSubstrate(name=BACKING_NAME, image=image)
        return backing

    def _destroy(self, sandbox: Sandbox) -> None:
        """destroying -> destroyed once the container is gone; then the record is dropped."""
        with sandbox.lock:
            self.remove_container(sandbox)
            self.transition(sandbox, "destroyed")
            self.by_id.pop(sandbox.id, None)

    def _emit(self, event: str, sandbox: Sandbox, old_state: str | None) -> None:
        dto = self.dto(sandbox)
        payload = dto if event == "sandbox.created" else {
            "sandbox": dto, "oldState": old_state, "newState": sandbox.state,
        }  # fmt: skip
        new_state = None if event == "sandbox.created" else sandbox.state
        self.events.append((event, sandbox.id, new_state, clock()))
        self._emit_to_room(event, payload)


def _desired(state: str) -> str:
    """The API's ``desiredState`` of a sandbox in `state`: where it is headed."""
    if state.startswith("destroy"):
        return "destroyed"
    return "paused" if state in ("pausing", "paused") else "started"
