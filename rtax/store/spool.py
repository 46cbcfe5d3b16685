"""Records the database could not take yet, kept on disk and written later.

Why (docs/measurement.md#failures): a writer meets a busy or unavailable database now and then
(past SQLite's busy wait, a full disk, a file moved away); a rollout that was measured must not
be lost to rtax's own trouble. Both writers, `rtax schedule` and `rtax probe`, save through this
one spool:

1. The record is stored, after any spooled earlier; a busy database is retried
   (`RETRY_PAUSES_S`, each attempt with SQLite's own busy wait).
2. Failing that, it is appended as one JSON line to ``<database>.spool.jsonl``, beside the
   database; if that can't be written either (the disk under the database is full), to the
   fallback ``<spool dir>/<name>-<hash of the database's path>.spool.jsonl`` (`paths.spool_dir`:
   ``$RTAX_SPOOL_DIR``, else the temp dir), another file system as a rule; and if neither takes
   it, it is held in memory and written before the next record.
3. Both files are replayed before every save and at the start of either command (`replay`).

A replay writes each record once: a record is one transaction, and one whose run_id is already
stored (a crash between the insert and the file's removal) is skipped. A record the database
refuses for good (a value SQLite can't bind, a constraint other than its run_id's) is moved to
``<database>.spool.rejected.jsonl`` with the reason and logged as an error: it never blocks the
records after it, and it is kept for a person to look at, never dropped. A line cut short (a crash
mid-append) is no whole rollout and is skipped, never stored. Appends and replays take an
exclusive `flock` on the file, so a probe and a scheduler sharing a database never lose a line to
each other's replay.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import logging
import os
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

from rtax.core import paths
from rtax.core.record import RolloutRecord
from rtax.store.database import Store, StoreError

log = logging.getLogger(__name__)

#: Pauses before the second and third attempt at a busy database (each attempt already waits
#: SQLite's busy timeout, `rtax.store.database.default_busy_timeout_s`).
RETRY_PAUSES_S = (0.1, 0.5)
#: Where a record is when it is neither stored nor in a file (`Spool.save`'s answer).
MEMORY = "memory"


def fallback_path(database: Path) -> Path:
    """The second spool file of `database`: in `paths.spool_dir`, named after the database."""
    digest = hashlib.sha256(str(Path(database).resolve()).encode()).hexdigest()[:12]
    return paths.spool_dir() / f"{Path(database).name}-{digest}.spool.jsonl"


class Spool:
    """The spool of the database at `database`; `open_store` opens a connection to it.
    `on_saved` hears of each record once it is in the database (written now or replayed from
    the spool): the scheduler's metrics count what is stored, never what was only tried."""

    def __init__(
        self,
        database: Path,
        open_store: Callable[[], Store],
        on_saved: Callable[[RolloutRecord], None] | None = None,
    ) -> None:
        self.path = Path(f"{database}.spool.jsonl")
        #: records the database refused for good (`refused`), kept beside it with the reason
        self.rejected = Path(f"{database}.spool.rejected.jsonl")
        self.fallback = fallback_path(database)
        self.open_store = open_store
        self.on_saved = on_saved
        #: records neither file could take, written before the next one
        self.pending: list[RolloutRecord] = []
        #: refused records the rejected file could not take either (kept, never retried)
        self.refused: list[RolloutRecord] = []
        self._lock = threading.RLock()

    @property
    def files(self) -> tuple[Path, Path]:
        """Where spooled records are looked for, in order."""
        return (self.path, self.fallback)

    def save(self, record: RolloutRecord, store: Store | None = None) -> str | None:
        """Store `record` (through `store`, else a new connection), after any spooled earlier;
        None once stored. If the database is busy past the retries or unavailable, spool it and
        return where it went: a file's path, or `MEMORY`."""
        with self._lock:
            try:
                self._store(record, store)
                return None
            except (StoreError, sqlite3.Error, OSError) as exc:
                if refused(exc):
                    return self._reject(record, exc)
                where = self._spool(record)
                why = f"busy after {len(RETRY_PAUSES_S) + 1} attempts" if is_busy(exc) else exc
                log.error(
                    "database unavailable (%s): run %s spooled to %s",
                    why,
                    record.run["run_id"],
                    where,
                )
                return where

    def _store(self, record: RolloutRecord, store: Store | None) -> None:
        for pause in (*RETRY_PAUSES_S, None):
            try:
                if store is None:
                    with self.open_store() as opened:
                        self._write(opened, record)
                else:
                    self._write(store, record)
                return
            except (StoreError, sqlite3.Error) as exc:
                if pause is None or not is_busy(exc):
                    raise
                log.warning("database busy: retrying in %g s", pause)
                time.sleep(pause)

    def _write(self, store: Store, record: RolloutRecord) -> None:
        self.drain(store)
        if _save_once(store, record):
            self._saved(record)

    def _saved(self, record: RolloutRecord) -> None:
        """Tell `on_saved`; its trouble is logged, never taken for the database's (the record
        is written: spooling it again would store it twice)."""
        if self.on_saved is None:
            return
        try:
            self.on_saved(record)
        except Exception:
            log.exception("on_saved failed for run %s (it is stored)", record.run.get("run_id"))

    def _reject(self, record: RolloutRecord, exc: BaseException) -> str:
        """Keep a record the database refuses for good apart, with why: it can't be stored,
        and retrying it would hold up every record after it."""
        entry = {"run": record.run, "actions": record.actions, "refused": str(exc)}
        line = json.dumps(entry, default=str)
        try:
            _append(self.rejected, f"\n{line}\n".encode())
            where = str(self.rejected)
        except OSError as err:
            log.error("cannot keep the refused record in %s: %s", self.rejected, err)
            where = MEMORY
            self.refused.append(record)
        log.error(
            "the database refuses run %s for good (%s): kept in %s, not retried",
            record.run.get("run_id"),
            exc,
            where,
        )
        return where

    def _spool(self, record: RolloutRecord) -> str:
        line = json.dumps({"run": record.run, "actions": record.actions}, default=str)
        # A leading newline ends any line an earlier append left cut short.
        data = f"\n{line}\n".encode()
        for path in self.files:
            try:
                _append(path, data)
                return str(path)
            except OSError as exc:
                log.error("cannot spool to %s: %s", path, exc)
        self.pending.append(record)
        return MEMORY

    def drain(self, store: Store) -> int:
        """Write the records held in memory and in both files; return how many were written.
        Raises `StoreError` if one can't be: the rest stay where they are (a record already
        written is skipped by its run_id on the next drain)."""
        written = 0
        with self._lock:
            while self.pending:
                try:
                    if _save_once(store, self.pending[0]):
                        written += 1
                        self._saved(self.pending[0])
                except StoreError as exc:
                    if not refused(exc):
                        raise
                    self._reject(self.pending[0], exc)
                self.pending.pop(0)
            for path in self.files:
                try:
                    written += _drain_file(path, store, self._saved, self._reject)
                except OSError as exc:  # unreadable here: kept, and no reason to refuse a save
                    log.error("cannot replay %s yet: %s", path, exc)
        if written:
            log.info("wrote %d spooled records", written)
        return written

    def replay(self, store: Store) -> int:
        """`drain` at a command's start: a database that can't take them yet only logs (they
        are written with the next save)."""
        try:
            return self.drain(store)
        except (StoreError, sqlite3.Error, OSError) as exc:
            log.error("spooled records kept for later (%s)", exc)
            return 0

    def spooled(self) -> int:
        """How many records wait in the files and in memory."""
        count = len(self.pending)
        for path in self.files:
            with contextlib.suppress(OSError):
                count += sum(1 for line in path.read_text().splitlines() if line.strip())
        return count


def is_busy(exc: BaseException) -> bool:
    """The database is locked by another writer (worth a retry), not broken."""
    while exc is not None:
        code = getattr(exc, "sqlite_errorcode", None)
        if code in (sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED):
            return True
        if "database is locked" in str(exc) or "database is busy" in str(exc):
            return True
        exc = exc.__cause__  # type: ignore[assignment]
    return False


def refused(exc: BaseException) -> bool:
    """The database refuses this record for good: a value SQLite can't bind, or a constraint
    it breaks (not its run_id's, which means already stored). Busy, full, read-only or
    missing databases are not: they take the record later."""
    while exc is not None:
        if isinstance(exc, sqlite3.InterfaceError | sqlite3.ProgrammingError | sqlite3.DataError):
            return True
        if isinstance(exc, sqlite3.IntegrityError):
            return not _already_stored(exc)
        exc = exc.__cause__  # type: ignore[assignment]
    return False


def _already_stored(exc: BaseException) -> bool:
    return "UNIQUE constraint failed: runs.run_id" in str(exc)


def _save_once(store: Store, record: RolloutRecord) -> int:
    """Save `record`; 0 if its run_id is already stored (it was written before), else 1."""
    try:
        store.save_rollout(record)
    except StoreError as exc:
        if _already_stored(exc):
            return 0
        raise
    return 1


@contextlib.contextmanager
def _locked(path: Path, flags: int) -> Iterator[int | None]:
    """`path` opened with `flags` under an exclusive flock, still the file at `path` once locked
    (a replay may have removed it meanwhile); None if it does not exist and is not created."""
    while True:
        try:
            fd = os.open(path, flags, 0o600)
        except FileNotFoundError:
            if flags & os.O_CREAT:
                raise
            yield None
            return
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            try:
                current = os.stat(path).st_ino == os.fstat(fd).st_ino
            except FileNotFoundError:
                current = False
            if current:
                yield fd
                return
        finally:
            os.close(fd)


def _append(path: Path, data: bytes) -> None:
    """Append `data` whole and synced, or leave the file as it was."""
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    with _locked(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT) as fd:
        assert fd is not None
        size = os.fstat(fd).st_size
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
            os.fsync(fd)
        except OSError:
            with contextlib.suppress(OSError):
                os.ftruncate(fd, size)
            raise


def _drain_file(
    path: Path,
    store: Store,
    saved: Callable[[RolloutRecord], None],
    reject: Callable[[RolloutRecord, BaseException], object],
) -> int:
    """Write the whole records of one spool file (telling `saved` of each, handing `reject`
    each the database refuses for good), then remove it."""
    with _locked(path, os.O_RDWR) as fd:
        if fd is None:
            return 0
        with os.fdopen(os.dup(fd), "rb") as handle:
            lines = handle.read().decode("utf-8", "replace").splitlines()
        written = 0
        for line in lines:
            if not line.strip():
                continue
            try:
                entry = json.loads(line)
                record = RolloutRecord(run=entry["run"], actions=list(entry["actions"]))
                if not record.run.get("run_id"):
                    raise ValueError("no run_id")
            except (ValueError, KeyError, TypeError, AttributeError):
                log.warning("skipped a spooled line cut short in %s (no whole rollout)", path)
                continue
            try:
                stored = _save_once(store, record)
            except StoreError as exc:
                if not refused(exc):
                    raise
                reject(record, exc)
                continue
            if stored:
                written += 1
                saved(record)
        path.unlink()
        return written
