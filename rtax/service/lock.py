"""One scheduler per database: the lock it holds for its lifetime, and the health check that
reads it.

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


def health(url: str, config_path: Path | None = None) -> list[str]:
    """What is wrong with a deployment (docs/container.md): the dashboard at `url` does not
    answer ``ok``, or no scheduler holds the lock of the configured database. Empty: healthy."""
    import urllib.request

    from rtax.settings import config

    problems = []
    try:
        with urllib.request.urlopen(url, timeout=5) as answer:
            if answer.read().strip() != b"ok":
                problems.append(f"dashboard at {url} did not answer ok")
    except OSError as exc:
        problems.append(f"dashboard at {url}: {exc}")
    try:
        lock = SchedulerLock(config.load(config_path).database)
        lock.acquire()  # we got it: no scheduler holds it
        lock.release()
        problems.append("no scheduler holds the database lock")
    except LockHeld:
        pass  # a scheduler is running
    except config.ConfigError as exc:
        problems.append(f"configuration: {exc.problems[0]}")
    except OSError as exc:
        problems.append(f"cannot check the scheduler lock: {exc}")
    return problems
