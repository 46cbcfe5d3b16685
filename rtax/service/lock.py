"""One scheduler per database: the lock it holds for its lifetime (`rtax.service.health` reads
it).

Why a flock (docs/configuration.md#scheduler): the kernel drops it when its process dies, however it
dies, so a crashed scheduler never blocks the next one, and "is a scheduler running on this
database?" is a question anyone (``rtax health``, the app image's healthcheck) can ask by trying to
take it.
"""

from __future__ import annotations

import fcntl
import os
import socket
from datetime import UTC, datetime
from pathlib import Path


class LockHeld(RuntimeError):
    """Another scheduler already owns this database."""


class SchedulerLock:
    """An exclusive flock on ``<database>.scheduler.lock`` for the scheduler's lifetime."""

    def __init__(self, database: Path) -> None:
        self.path = Path(f"{database}.scheduler.lock")
        self._fd: int | None = None

    def acquire(self) -> None:
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 512, 0).decode(errors="replace").strip() or "unknown"
            os.close(fd)
            raise LockHeld(
                f"another scheduler already runs on this database ({holder}); lock: {self.path}"
            ) from None
        os.ftruncate(fd, 0)
        os.pwrite(
            fd,
            f"pid {os.getpid()} on {socket.gethostname()} since "
            f"{datetime.now(UTC).isoformat(timespec='seconds')}".encode(),
            0,
        )
        self._fd = fd

    def release(self) -> None:
        if self._fd is not None:
            fcntl.flock(self._fd, fcntl.LOCK_UN)
            os.close(self._fd)
            self._fd = None
