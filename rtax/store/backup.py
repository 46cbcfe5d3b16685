"""A copy of the live database while the scheduler writes: SQLite's online backup, checked.

Why this way (docs/data.md#backups): copying the file with `cp` while the scheduler writes can
catch a page half-written or a write-ahead log out of step with it, and a copy that opens is
not a copy that holds. SQLite's backup API reads the database through SQLite itself, as one
consistent snapshot, and in WAL mode a reader never blocks a writer: the scheduler goes on
storing rollouts while the copy is made ("database is locked" can't come from it). The copy is
made in **one step** (all pages at once) because a backup in several steps restarts whenever
another connection writes between two of them, and a scheduler that writes every few seconds
could keep a large copy from ever finishing. The price of one step: the snapshot is pinned
for the copy's duration, so a checkpoint can't move the log past it, and the WAL grows by what
is written meanwhile (it shrinks back at the next checkpoint; `journal_size_limit`).

Then the copy is checked before it takes its name: ``PRAGMA integrity_check`` must say ``ok``,
and it must open as an rtax database with at least the runs the live one had when the copy
began. It is written beside its destination as ``<out>.partial`` and renamed into place only
once checked, so a failed or interrupted backup never leaves a file that looks like a backup.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from rtax.store.database import Store, StoreError


@dataclass(frozen=True)
class Backup:
    """What `backup` made and checked."""

    path: Path
    bytes: int
    #: runs and action rows in the copy (the live database's as the copy began, at least)
    runs: int
    actions: int
    #: runs the live database had when the copy began
    runs_before: int
    seconds: float
    integrity: str


def backup(
    source: Path, out: Path, *, overwrite: bool = False, log: Callable[[str], None] | None = None
) -> Backup:
    """Copy the rtax database `source` to `out` while others may write to it, check the copy
    and move it into place (see the module's doc); `log` hears when the copy starts. A
    `StoreError` says why not, and leaves nothing at `out`."""
    source, out = Path(source), Path(out)
    if not source.is_file():
        raise StoreError(f"no database at {source}")
    if out.resolve() == source.resolve():
        raise StoreError(f"--out {out} is the database itself")
    if out.is_dir():
        raise StoreError(f"--out {out} is a folder")
    if not out.parent.is_dir():
        raise StoreError(f"--out {out}: folder {out.parent} does not exist")
    if out.exists() and not overwrite:
        raise StoreError(f"--out {out} exists (pass --force to replace it)")
    partial = out.with_name(out.name + ".partial")
    if log is not None:
        log(f"copying {source} ({source.stat().st_size / 1e6:,.1f} MB) to {out} ...")
    started = time.monotonic()
    with Store(source, read_only=True) as live:
        runs_before = live.runs.count()
        try:
            partial.unlink(missing_ok=True)
            target = sqlite3.connect(partial)
            try:
                live.db.conn.backup(target, pages=-1)  # one step: see the module's doc
                # one file, no log to travel with it; a store that opens it to write turns
                # WAL on again (rtax.store.database)
                target.execute("PRAGMA journal_mode = DELETE")
                integrity = str(target.execute("PRAGMA integrity_check").fetchone()[0])
            finally:
                target.close()
        except (sqlite3.Error, OSError) as exc:
            partial.unlink(missing_ok=True)
            raise StoreError(f"backup of {source} to {out} failed: {exc}") from exc
    try:
        if integrity != "ok":
            raise StoreError(f"the copy of {source} failed its integrity check: {integrity}")
        with Store(partial, read_only=True) as copy:
            runs, actions = copy.runs.count(), copy.runs.count_actions()
        if runs < runs_before:
            raise StoreError(f"the copy holds {runs} runs, the database had {runs_before}")
        _drop_log(partial)
        os.replace(partial, out)
    except BaseException:
        partial.unlink(missing_ok=True)
        _drop_log(partial)
        raise
    return Backup(
        path=out,
        bytes=out.stat().st_size,
        runs=runs,
        actions=actions,
        runs_before=runs_before,
        seconds=time.monotonic() - started,
        integrity=integrity,
    )


def _drop_log(path: Path) -> None:
    """A copy travels as one file: remove any ``-wal``/``-shm`` an open left next to it (the
    copy is in rollback-journal mode and complete without them)."""
    for suffix in ("-wal", "-shm"):
        with contextlib.suppress(FileNotFoundError):
            Path(f"{path}{suffix}").unlink()
