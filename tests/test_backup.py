"""`rtax backup`: a checked copy of the live database while a real scheduler writes to it, and
the copy restored into a working store (docs/data.md#backups)."""

from __future__ import annotations

import os
import shutil
import signal
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from factories import make_record
from polling import DEADLINE_S, wait_for
from rtax.store.backup import backup
from rtax.store.database import Store, StoreError

CONFIG = """
database = "live.db"
[scheduler]
deadline = "1m"
[[substrates]]
name = "local"
kind = "local"
[[plans]]
name = "fast"
substrates = ["local"]
tier = "T0"
interval = "1s"
"""


def _runs(db: Path) -> int:
    """Runs stored so far; 0 while the scheduler has yet to make the file and its tables."""
    try:
        with Store(db, read_only=True) as store:
            return store.runs.count()
    except StoreError:
        return 0


def test_a_backup_while_the_scheduler_writes_is_whole_and_restores(tmp_path: Path) -> None:
    config = tmp_path / "rtax.toml"
    config.write_text(CONFIG)
    live = tmp_path / "live.db"
    env = {**os.environ, "RTAX_LOCAL_ROOT": str(tmp_path / "envs")}
    cmd = [sys.executable, "-m", "rtax", "schedule", "--config", str(config)]
    scheduler = subprocess.Popen(
        cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True
    )
    try:
        wait_for(lambda: _runs(live) >= 3, "the scheduler storing 3 runs")
        copy = tmp_path / "backups" / "rtax-copy.db"
        copy.parent.mkdir()
        done = subprocess.run(
            [sys.executable, "-m", "rtax", "backup", "--config", str(config), "--out", str(copy)],
            capture_output=True,
            text=True,
            timeout=DEADLINE_S,
        )
        assert done.returncode == 0, done.stderr
        assert "integrity ok" in done.stderr
        after = _runs(live)
        wait_for(lambda: _runs(live) > after, "the scheduler storing on after the backup")
    finally:
        scheduler.send_signal(signal.SIGINT)
        _, errors = scheduler.communicate(timeout=DEADLINE_S)
    assert "database is locked" not in errors
    # one file, checked, nothing half-made beside it
    assert sorted(p.name for p in copy.parent.iterdir()) == ["rtax-copy.db"]
    conn = sqlite3.connect(copy)
    try:
        assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "delete"
    finally:
        conn.close()
    with Store(copy, read_only=True) as store:
        held = store.runs.count()
        assert held >= 3 and store.runs.count_actions() >= 3
    assert f"{held:,} runs" in done.stderr
    # restored: copied where a database lives, opened to write, written to and read back
    restored = tmp_path / "restored" / "rtax.db"
    restored.parent.mkdir()
    shutil.copy(copy, restored)
    with Store(restored) as store:
        store.save_rollout(make_record("after-restore"))
        assert store.runs.count() == held + 1
        assert store.db.journal_mode == "wal"


@pytest.mark.parametrize(
    ("out", "says"),
    [
        ("exists.db", r"exists \(pass --force"),
        ("live.db", "is the database itself"),
        ("folder", "is a folder"),
        ("missing/copy.db", "does not exist"),
    ],
)
def test_a_backup_that_cannot_be_made_says_why_and_leaves_nothing(
    tmp_path: Path, out: str, says: str
) -> None:
    live = tmp_path / "live.db"
    with Store(live) as store:
        store.save_rollout(make_record("r1"))
    (tmp_path / "exists.db").write_text("someone's file")
    (tmp_path / "folder").mkdir()
    before = sorted(p.name for p in tmp_path.iterdir())
    with pytest.raises(StoreError, match=says):
        backup(live, tmp_path / out)
    assert sorted(p.name for p in tmp_path.iterdir()) == before
    assert (tmp_path / "exists.db").read_text() == "someone's file"
    made = backup(live, tmp_path / "exists.db", overwrite=True)
    assert (made.runs, made.runs_before, made.integrity) == (1, 1, "ok")


def test_a_file_that_is_not_an_rtax_database_is_refused(tmp_path: Path) -> None:
    other = tmp_path / "other.db"
    sqlite3.connect(other).execute("CREATE TABLE t (x)").connection.close()
    with pytest.raises(StoreError):
        backup(other, tmp_path / "copy.db")
    assert not (tmp_path / "copy.db").exists()
    assert not (tmp_path / "copy.db.partial").exists()
