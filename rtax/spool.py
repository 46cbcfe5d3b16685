"""Records the database could not take yet, kept on disk and written later.

Why (docs/measurement.md#failures): a long-running scheduler meets a busy or unavailable database
now and then (past sqlite's own 30 s busy wait, a full disk, a file moved away); a rollout that
was measured must not be lost to rtax's own trouble. The spool is one JSON object a line beside
the database, written in order before the next record and at the next start.
"""

from __future__ import annotations

import json
import logging
import os
import sqlite3
import threading
from collections.abc import Callable
from pathlib import Path

from rtax.record import RolloutRecord
from rtax.store import Store, StoreError

log = logging.getLogger("rtax.scheduler")


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
        self.open_store = open_store
        self.on_saved = on_saved
        self._lock = threading.Lock()

    def save(self, record: RolloutRecord) -> None:
        """Store `record`, after any spooled earlier; if the database is busy or unavailable,
        spool it."""
        with self._lock:
            try:
                with self.open_store() as store:
                    self.drain(store)
                    store.save_rollout(record)
            except (StoreError, sqlite3.Error, OSError) as exc:
                log.error("database unavailable (%s): run %s spooled", exc, record.run["run_id"])
            else:
                self._saved(record)
                return
            line = json.dumps({"run": record.run, "actions": record.actions}, default=str)
            with self.path.open("a") as out:
                out.write(line + "\n")
                out.flush()
                os.fsync(out.fileno())

    def drain(self, store: Store) -> None:
        """Write the spooled records (each once: the file is rewritten with those left)."""
        if not self.path.exists():
            return
        lines = [line for line in self.path.read_text().splitlines() if line.strip()]
        for i, line in enumerate(lines):
            entry = json.loads(line)
            spooled = RolloutRecord(run=entry["run"], actions=entry["actions"])
            try:
                store.save_rollout(spooled)
            except StoreError as exc:
                if "UNIQUE" not in str(exc):  # already written (a crash after the insert)
                    self.path.write_text("".join(f"{rest}\n" for rest in lines[i:]))
                    raise
            else:
                self._saved(spooled)
        self.path.unlink()
        log.info("wrote %d spooled records", len(lines))

    def _saved(self, record: RolloutRecord) -> None:
        """Tell `on_saved`; its trouble is logged, never taken for the database's (the record
        is written: spooling it again would store it twice)."""
        if self.on_saved is None:
            return
        try:
            self.on_saved(record)
        except Exception:
            log.exception("on_saved failed for run %s (it is stored)", record.run.get("run_id"))
