"""Keeping a long-lived scheduler's resident memory flat (docs/soak.md#memory).

Why this exists: a 60-minute soak measured the scheduler's resident memory growing ~10 MB an
hour while the memory Python itself traces stayed flat (tracemalloc), so the growth was in native
allocators, not in rtax's objects. Two of them hold on to what they once used:

- pandas 3 keeps strings in Arrow arrays, and pyarrow's default pool (mimalloc in its wheels)
  keeps freed pages in per-thread heaps; the scheduler reads the store from a different worker
  thread every job, so each thread's heap lingers. Arrow's system pool gives them back to malloc.
- glibc malloc opens an arena per thread that contends (up to 8 per core) and only returns
  memory from the top of each; a cap of two arenas and a `malloc_trim` after each detection pass
  (the job that reads the most) hand freed pages back to the kernel.

Side by side over 26 minutes at 30x the shipped cadence, pyarrow's system pool alone cut the
growth from ~23 to ~6 MB an hour, the arena cap alone to ~17. Everything here is best effort:
on a platform without glibc or pyarrow it does nothing, and it never changes a measurement
(the rollouts' timings come from their own substrates, not from this process's allocator).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging
from functools import cache

log = logging.getLogger(__name__)

M_ARENA_MAX = -8  # glibc's mallopt parameter number (malloc.h)
ARENAS = 2


@cache
def _libc() -> ctypes.CDLL | None:
    """glibc, when this process runs on it (musl and macOS have neither call)."""
    name = ctypes.util.find_library("c")
    if not name:
        return None
    try:
        libc = ctypes.CDLL(name)
        libc.malloc_trim, libc.mallopt  # noqa: B018 - both must exist
    except (OSError, AttributeError):
        return None
    return libc


def settle() -> list[str]:
    """Set up this process's allocators for a long life (once, at the scheduler's start); says
    what it changed, for the log."""
    done: list[str] = []
    try:
        import pyarrow

        pyarrow.set_memory_pool(pyarrow.system_memory_pool())
        done.append("Arrow's system memory pool")
    except Exception as exc:  # pyarrow missing or too old: nothing to change
        log.debug("arrow pool unchanged: %s", exc)
    libc = _libc()
    if libc is not None and libc.mallopt(M_ARENA_MAX, ARENAS) == 1:
        done.append(f"{ARENAS} malloc arenas")
    return done


def trim() -> bool:
    """Give freed heap pages back to the kernel (glibc's `malloc_trim`); True when some were."""
    libc = _libc()
    return bool(libc is not None and libc.malloc_trim(0))
