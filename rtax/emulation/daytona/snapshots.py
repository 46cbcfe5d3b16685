"""The snapshots: the configured map (name -> local image) and those made from a sandbox.

Why (docs/emulations.md): the SDK's ``Sandbox.create_snapshot(name)`` captures a sandbox's file
system into a snapshot that new sandboxes are created from (``POST /sandbox`` with
``snapshot=name``). The emulation does it with the engine's own ``docker commit`` of the
sandbox's container, into an image of `SNAPSHOT_REPOSITORY` tagged with the snapshot's id,
registered in the map only once committed (state ``pending`` -> ``active``, or ``error`` with
an ``errorReason``), so that a create from it works as from any configured snapshot. A commit
keeps files, not memory, as Daytona's own container snapshots do (its API: "Container sandboxes
do not support memory snapshots").

Nothing committed outlives its snapshot or the emulation: a deleted snapshot leaves the map at
once (the API answers 404 for it from then on) and its image is removed as soon as no container
uses it (at once, else retried after every sandbox removal), and `close` removes every image
committed here once the containers are gone (a fork's image too: `discard`). The images inherit
the rtax labels of the container they were committed from, its owner included, so an emulation
that died without `close` has its images removed by the next one's `reap_dead` (a live
emulation's are kept).

The configured snapshots are listed as ``general`` ones of state ``active`` (their image is the
configured one, never removed here).
"""

from __future__ import annotations

import contextlib
import logging
import threading
import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from rtax.emulation.daytona.api import ORGANIZATION_ID, HttpError

log = logging.getLogger(__name__)

#: The repository of the images committed for snapshots (a tag per snapshot id).
SNAPSHOT_REPOSITORY = "rtax-daytona-snapshot"
#: Bound on one engine call about an image (a commit of a set-up tier's container included).
IMAGE_CALL_S = 300.0


@dataclass
class Snapshot:
    """One snapshot's API record and the image behind it."""

    id: str
    name: str
    #: the local image sandboxes from it are created from (None until committed)
    image: str | None
    state: str = "pending"
    #: made here by a commit (its image is removed with it); False: a configured one
    committed: bool = False
    source_sandbox_id: str | None = None
    #: the image's size in bytes, once committed
    size_bytes: int | None = None
    error_reason: str | None = None
    created_at: str = field(default_factory=lambda: datetime.now(UTC).isoformat())


class SnapshotStore:
    """The snapshots of one emulation. `images` is the map a create looks names up in (name ->
    local image): configured entries from the start, committed ones once active."""

    def __init__(self, images: dict[str, str]) -> None:
        self.images = images
        self._lock = threading.Lock()
        self.by_name: dict[str, Snapshot] = {
            name: Snapshot(str(uuid.uuid4()), name, image, state="active")
            for name, image in images.items()
        }
        #: committed images still to be removed (a container may use one)
        self.doomed: list[str] = []

    # -- the API's view ----------------------------------------------------------------------

    def dto(self, snap: Snapshot) -> dict[str, Any]:
        """The API's ``SnapshotDto``; ``size`` in GiB, as Daytona's runners report it."""
        now = datetime.now(UTC).isoformat()
        size = None if snap.size_bytes is None else snap.size_bytes / 1024**3
        return {
            "id": snap.id,
            "organizationId": None if not snap.committed else ORGANIZATION_ID,
            "general": not snap.committed,
            "name": snap.name,
            "imageName": snap.image,
            "state": snap.state,
            "size": size,
            "entrypoint": None,
            "cpu": 1,
            "gpu": 0,
            "mem": 1,
            "disk": 3,
            "errorReason": snap.error_reason,
            "createdAt": snap.created_at,
            "updatedAt": now,
            "lastUsedAt": None,
            "sourceSandboxId": snap.source_sandbox_id,
        }

    def find(self, ref: str) -> Snapshot:
        """A snapshot by id or name, else the API's 404 (a deleted one included)."""
        with self._lock:
            found = self.by_name.get(ref) or next(
                (s for s in self.by_name.values() if s.id == ref), None
            )
        if found is None:
            raise HttpError(404, f"Snapshot with ID or name {ref} not found")
        return found

    def image_of(self, name: str) -> str:
        """The image a sandbox created from the snapshot `name` runs: 404 when there is no such
        snapshot, 400 when it is not active yet (or failed)."""
        with self._lock:
            snap = self.by_name.get(name)
        if snap is None:
            raise HttpError(404, f"Snapshot {name} not found")
        if snap.state != "active" or snap.image is None:
            raise HttpError(400, f"Snapshot {name} is {snap.state}")
        return snap.image

    # -- life of a snapshot ------------------------------------------------------------------

    def begin(self, name: str, source_sandbox_id: str) -> Snapshot:
        """A new snapshot `name` from a sandbox, ``pending`` until `commit` ends it; 409 when
        the name is taken."""
        if not name:
            raise HttpError(400, "name is required")
        with self._lock:
            if name in self.by_name:
                raise HttpError(409, f"Snapshot with name {name} already exists")
            snap = Snapshot(str(uuid.uuid4()), name, None, committed=True,
                            source_sandbox_id=source_sandbox_id)  # fmt: skip
            self.by_name[name] = snap
        return snap

    def commit(self, api: Any, container_id: str, snap: Snapshot) -> None:
        """``docker commit`` of `container_id` into the image of `snap`, which then enters the
        map (``active``); ``error`` with the engine's reason if the commit fails."""
        try:
            image, size = commit_image(api, container_id, snap.id)
        except Exception as exc:  # the engine's error is the snapshot's errorReason
            self.fail(snap, f"commit failed: {exc}")
            return
        with self._lock:
            snap.image, snap.size_bytes = image, size
            if self.by_name.get(snap.name) is snap:  # not deleted while it was committed
                snap.state = "active"
                self.images[snap.name] = image
            else:
                self.doomed.append(image)

    def discard(self, image: str) -> None:
        """`image` (committed here, e.g. for a fork) is to be removed once no container uses
        it: at the next `sweep`."""
        with self._lock:
            self.doomed.append(image)

    def fail(self, snap: Snapshot, reason: str) -> None:
        with self._lock:
            snap.state, snap.error_reason = "error", reason

    def delete(self, ref: str) -> Snapshot:
        """Take the snapshot out of the map (no new sandbox from it), ``removing``; its image
        goes with the next `sweep` that finds no container using it. One still being committed
        is doomed by its `commit`; one whose commit failed has no image to remove."""
        snap = self.find(ref)
        with self._lock:
            if self.by_name.get(snap.name) is snap:
                del self.by_name[snap.name]
                self.images.pop(snap.name, None)
                snap.state = "removing"
                if snap.committed and snap.image is not None:
                    self.doomed.append(snap.image)
        return snap

    def sweep(self, api: Any, *, force: bool = False) -> None:
        """Remove the images of deleted snapshots that no container uses any more (the engine
        refuses the others: they are tried again at the next sweep); `force` at the end, when
        no container is left and nothing may stay."""
        from docker import errors

        from rtax.substrates.docker import daemon

        with self._lock:
            doomed = list(self.doomed)
        for image in doomed:
            try:
                with daemon.call_timeout(IMAGE_CALL_S):
                    api.remove_image(image, force=force)
            except errors.ImageNotFound:
                pass  # gone already: forgotten below
            except Exception as exc:  # in use by a container still there: the next sweep
                if force:
                    log.warning("could not remove snapshot image %s: %s", image, exc)
                continue
            with self._lock, contextlib.suppress(ValueError):
                self.doomed.remove(image)

    def close(self, api: Any) -> None:
        """Remove every image committed here (the containers are gone by now): deleted
        snapshots' and live ones' alike; the map keeps only the configured snapshots."""
        with self._lock:
            for name, snap in list(self.by_name.items()):
                if snap.committed:
                    del self.by_name[name]
                    self.images.pop(name, None)
                    if snap.image is not None:
                        self.doomed.append(snap.image)
        self.sweep(api, force=True)

    @staticmethod
    def reap_dead(api: Any) -> None:
        """Remove the snapshot images of emulations whose process is gone (their owner label,
        inherited from the container committed, names a dead pid on this host); a live
        emulation's are kept, as the reaper keeps its containers."""
        from rtax.substrates import kit, reaper

        host = kit.owner_host()
        for image in api.images(name=SNAPSHOT_REPOSITORY):
            owner = (image.get("Labels") or {}).get(kit.OWNER) or ""
            owner_host, _, pid = owner.rpartition(":")
            if owner_host == host and pid.isdigit() and not reaper.pid_alive(int(pid)):
                with contextlib.suppress(Exception):
                    api.remove_image(image["Id"], force=True)


def commit_image(api: Any, container_id: str, tag: str) -> tuple[str, int | None]:
    """``docker commit`` of `container_id` as `SNAPSHOT_REPOSITORY`:`tag`: the image's
    reference and its size in bytes (None if the engine doesn't say). The container is paused
    for the commit (the engine's default), so its files are taken at one moment."""
    from rtax.substrates.docker import daemon

    with daemon.call_timeout(IMAGE_CALL_S):
        made = api.commit(container_id, repository=SNAPSHOT_REPOSITORY, tag=tag)
        size = api.inspect_image(made["Id"]).get("Size")
    return f"{SNAPSHOT_REPOSITORY}:{tag}", size if isinstance(size, int) else None
