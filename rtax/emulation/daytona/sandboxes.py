"""The sandboxes: their API records, their states and events, and the containers behind them.

Why (docs/emulations.md): every sandbox is a real container of the runner image made by a
`DockerSubstrate` named ``daytona-emulation`` (so the reaper finds a dead process's orphans);
states move creating -> started (after the container runs) and destroying -> destroyed (after it
is removed), with an event on each transition, which is what the SDK waits on. Provisioning and
removal run on a worker pool, apart from the server's loop.
"""

from __future__ import annotations

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

    def start(self) -> None:
        """Reap dead runs' backing containers (a live process's are kept); start the pool."""
        from rtax.substrates import reaper
        from rtax.substrates.docker.substrate import DockerSubstrate

        self.backing = DockerSubstrate(name=BACKING_NAME, image=self.image)
        reaper.reap([self.backing])
        self.pool = ThreadPoolExecutor(max_workers=32, thread_name_prefix="daytona-emu")

    def stop(self) -> None:
        """Wait for the work in progress, then remove every container made."""
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
            "desiredState": "destroyed" if sandbox.state.startswith("destroy") else "started",
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
            image = self.snapshots.get(body["snapshot"])
            if image is None:
                raise HttpError(404, f"Snapshot {body['snapshot']} not found")
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
        for session in sandbox.sessions.values():
            session.shell.close()
        sandbox.sessions.clear()
        if sandbox.env is not None:
            remove_backing(self.backing, sandbox.env)
            sandbox.env = None

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
                from rtax.substrates.docker.substrate import DockerSubstrate

                backing = self.backing
                if sandbox.image != self.image:
                    backing = DockerSubstrate(name=BACKING_NAME, image=sandbox.image)
                sandbox.env = backing.create(sandbox.id)
                self._made.add(sandbox.env.env_id)
                backing.wait_running(sandbox.env, 120)
            except SubstrateError as exc:
                sandbox.error_reason = f"{type(exc).__name__}: {exc}"
                self.transition(sandbox, "error")
                return
            if sandbox.state == "creating":  # not deleted while its container was made
                self.transition(sandbox, "started")

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
