"""Snapshots of Docker containers: checkpoint one after its set-up, restore fresh ones from it.

What this engine (Docker 20.10, experimental) makes possible, and why it is done this way
(docs/measurement.md#launch-paths):

- ``POST /containers/{id}/checkpoints`` with a ``CheckpointDir`` of rtax's own dumps the
  container's processes (runc: CRIU; gVisor: runsc's own checkpoint) and stops it. The files
  a runc container wrote are not in that dump: they are kept by ``docker commit``, and
  restored containers are created from the committed image. gVisor keeps its root overlay in
  the sandbox, so its checkpoint holds the files too and nothing is committed.
- ``POST /containers/{id}/start?checkpoint=NAME`` restores a container from a checkpoint in
  *its own* checkpoint folder (20.10 refuses a ``checkpoint-dir`` on start): the snapshot is
  copied there first, under the engine's data root, so restore needs a local engine. A file
  unique to each restore is added, because the engine uploads the checkpoint into
  containerd's content store and refuses one whose digest it already holds ("commit failed:
  already exists") when the same snapshot is restored again before its garbage collection.
- A snapshottable container runs without Docker's ``--init``: CRIU can't restore the
  docker-init binary's file bind mount (``Can't remount ... with MS_PRIVATE``). Its first
  process is `holder_command`, which keeps a value in memory: gVisor restores the
  container's first process tree but not processes started by ``docker exec`` (they are
  gone after a restore), so PID 1 is the one place an in-memory state survives on both.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

#: The checkpoint's name in each container's checkpoint folder.
CHECKPOINT = "rtax"


def size_of(folder: Path) -> int:
    """Bytes under `folder` (the checkpoint's files)."""
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())


def checkpoint(api: Any, container_id: str, into: Path) -> None:
    """Dump `container_id` into `into`/`CHECKPOINT` and stop it (the engine's checkpoint API)."""
    into.mkdir(parents=True, exist_ok=True)
    response = api._post_json(
        api._url("/containers/{0}/checkpoints", container_id),
        data={"CheckpointID": CHECKPOINT, "CheckpointDir": str(into), "Exit": True},
    )
    api._raise_for_status(response)


def place(root: str, container_id: str, snapshot_dir: Path, restore_id: str) -> None:
    """Copy the snapshot into the new container's own checkpoint folder (hard links where the
    two are on one file system), with a file unique to this restore (see the module's doc)."""
    target = Path(root) / "containers" / container_id / "checkpoints" / CHECKPOINT
    source = snapshot_dir / CHECKPOINT

    def link_or_copy(src: str, dst: str) -> None:
        try:
            os.link(src, dst)
        except OSError:
            shutil.copy2(src, dst)

    shutil.copytree(source, target, copy_function=link_or_copy)
    (target / "rtax-restore").write_text(restore_id)


def start_from(api: Any, container_id: str) -> None:
    """Start `container_id` from the checkpoint placed in its folder."""
    response = api._post(
        api._url("/containers/{0}/start", container_id), params={"checkpoint": CHECKPOINT}
    )
    api._raise_for_status(response)
