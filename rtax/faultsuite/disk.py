"""A small disk under the suite's database, which it fills up mid-run and frees again.

Why (docs/faults.md): "a full disk under the database" must be a real ENOSPC from the kernel, on
the file system the database, its WAL and its spool live on, not a mocked exception. A tmpfs of a
few dozen megabytes is that disk: `fill` writes a filler file until the kernel refuses, `free`
removes it, `close` unmounts, whatever happened.
"""

from __future__ import annotations

import errno
import os
import subprocess
from pathlib import Path

CHUNK = 1 << 20


class SmallDisk:
    """A tmpfs of `size_mb` mounted at `path` (made if missing)."""

    def __init__(self, path: Path, size_mb: int = 64) -> None:
        self.path = path
        self.size_mb = size_mb
        self.filler = path / ".faultsuite-filler"
        self.mounted = False

    def __enter__(self) -> SmallDisk:
        self.path.mkdir(parents=True, exist_ok=True)
        done = subprocess.run(
            ["mount", "-t", "tmpfs", "-o", f"size={self.size_mb}m,mode=0700", "tmpfs", self.path],
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        )
        if done.returncode != 0:
            raise RuntimeError(f"could not mount a tmpfs at {self.path}: {done.stderr.strip()}")
        self.mounted = True
        return self

    def fill(self) -> int:
        """Write the filler until the disk is full; return the bytes written."""
        written = 0
        block = b"\0" * CHUNK
        with self.filler.open("ab") as out:
            try:
                while True:
                    out.write(block)
                    out.flush()
                    written += CHUNK
            except OSError as exc:
                if exc.errno != errno.ENOSPC:
                    raise
                # then the last partial block: the kernel takes what fits, byte by byte
                try:
                    while True:
                        os.write(out.fileno(), b"\0" * 512)
                except OSError as tail:
                    if tail.errno != errno.ENOSPC:
                        raise
        return written

    def full(self) -> bool:
        stat = os.statvfs(self.path)
        return stat.f_bavail * stat.f_frsize < CHUNK

    def free(self) -> None:
        self.filler.unlink(missing_ok=True)

    def __exit__(self, *exc: object) -> None:
        self.free()
        if self.mounted:
            subprocess.run(
                ["umount", "-l", self.path], capture_output=True, timeout=30, check=False
            )
            self.mounted = False
