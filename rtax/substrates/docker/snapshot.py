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
- containerd (1.6, as in Debian 12) unpacks that upload into a ``ctrd-checkpoint*`` folder
  of its temporary directory to restore from, and never removes it (containerd issue
  10166): one copy of the checkpoint per restore, 0.2 to 2 MB for the runner's T0 here
  (more for a bigger process), about 2,900 copies a day for examples/paths.toml's two
  restore paths probed every minute. The file unique to each restore names the copy, so
  `remove_unpacked` removes this restore's own once its container is gone, and nothing
  another tool's restores made.
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
#: The file unique to each restore, in the placed checkpoint and so in containerd's copy.
MARKER = "rtax-restore"
#: The prefix of the folders containerd unpacks a checkpoint into to restore from it.
UNPACKED_PREFIX = "ctrd-checkpoint"


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
    (target / MARKER).write_text(restore_id)


def start_from(api: Any, container_id: str) -> None:
    """Start `container_id` from the checkpoint placed in its folder."""
    response = api._post(
        api._url("/containers/{0}/start", container_id), params={"checkpoint": CHECKPOINT}
    )
    api._raise_for_status(response)


def temp_dir_of(environ: dict[str, str]) -> Path:
    """Where a containerd with `environ` makes its checkpoint folders: its
    ``XDG_RUNTIME_DIR``, else Go's temporary directory (``TMPDIR``, else /tmp)."""
    return Path(environ.get("XDG_RUNTIME_DIR") or environ.get("TMPDIR") or "/tmp")


def containerd_temp_dirs(proc: Path = Path("/proc")) -> set[Path]:
    """The temporary directory of every containerd this host runs (a fault suite's private
    engine starts its own beside the system's); /tmp when none can be seen (rtax in a
    container without the host's processes: then nothing of the engine's is found there)."""
    found: set[Path] = set()
    for entry in proc.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if (entry / "comm").read_text().strip() != "containerd":
                continue
            raw = (entry / "environ").read_bytes()
        except OSError:  # gone meanwhile, or not ours to read
            continue
        pairs = (item.partition(b"=") for item in raw.split(b"\0") if item)
        found.add(temp_dir_of({k.decode(): v.decode(errors="replace") for k, _, v in pairs}))
    return found or {Path("/tmp")}


def unpacked_copies(restore_ids: set[str] | None, temp_dirs: set[Path]) -> list[Path]:
    """containerd's unpacked copies of rtax's restores under `temp_dirs`: those of
    `restore_ids`, or every one rtax marked (None)."""
    copies = []
    for folder in temp_dirs:
        for marker in folder.glob(f"{UNPACKED_PREFIX}*/{MARKER}"):
            try:
                mine = restore_ids is None or marker.read_text() in restore_ids
            except OSError:  # removed meanwhile
                continue
            if mine:
                copies.append(marker.parent)
    return copies


def remove_unpacked(restore_id: str, temp_dirs: set[Path] | None = None) -> int:
    """Remove containerd's unpacked copy of restore `restore_id` (see the module's doc);
    how many were removed. Called once the restored container is gone: the restored
    processes hold what they still read open, so the folder is not needed after the start."""
    copies = unpacked_copies({restore_id}, temp_dirs or containerd_temp_dirs())
    for copy in copies:
        shutil.rmtree(copy, ignore_errors=True)
    return len(copies)
