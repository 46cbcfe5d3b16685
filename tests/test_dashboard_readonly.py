"""The dashboard runs no command and writes nothing (docs/dashboard.md#read-only): every page
rendered on a populated database while every way of starting a process raises, and the
database's folder compared before and after, file by file."""

from __future__ import annotations

import _posixsubprocess
import hashlib
import os
import sqlite3
import subprocess
from contextlib import ExitStack
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import sqlite_utils
import streamlit as st
from streamlit.testing.v1 import AppTest

from factories import make_record
from polling import DEADLINE_S
from rtax.dashboard import data
from rtax.store import Store, migrations

APP = str(Path(__file__).resolve().parent.parent / "app.py")
PAGES = (
    "pages/overview.py",
    "pages/cold_start.py",
    "pages/decomposition.py",
    "pages/amortization.py",
    "pages/projection.py",
    "pages/capacity.py",
    "pages/data.py",
)
#: Every way a Python process starts another (subprocess ends in _posixsubprocess.fork_exec).
SPAWNERS = [
    (os, name)
    for name in (
        "system",
        "popen",
        "fork",
        "forkpty",
        "posix_spawn",
        "posix_spawnp",
        *(n for n in dir(os) if n.startswith(("exec", "spawn"))),
    )
    if hasattr(os, name)
] + [(subprocess, "Popen"), (_posixsubprocess, "fork_exec")]


def _populate(path: Path) -> None:
    now = datetime.now(UTC)
    with Store(path) as store:
        for i, (sub, tier, steps, ep) in enumerate(
            [
                ("local", "T0", 0, 0.02),
                ("local", "T0", 0, 0.03),
                ("docker", "T0", 0, 0.3),
                ("docker", "T0", 0, 0.35),
                ("local", "T2", 10, 1.5),
                ("local", "T2", 50, 6.0),
                ("docker", "T2", 10, 1.4),
                ("docker", "T2", 50, 3.4),
            ]
        ):
            started = (now - timedelta(minutes=i)).isoformat(timespec="microseconds")
            store.save_rollout(
                make_record(
                    f"ro{i}",
                    substrate=sub,
                    tier=tier,
                    steps=steps,
                    episode_s=ep,
                    n_actions=steps or 1,
                    started_at=started,
                )
            )


def _snapshot(folder: Path) -> dict[str, tuple[int, int, str]]:
    """Every file's (size, mtime, sha256), and the folder's own mtime. SQLite's wal-index
    (-shm) is shared memory every reader writes its read mark into: only its presence counts."""
    files: dict[str, tuple[int, int, str]] = {".": (0, folder.stat().st_mtime_ns, "")}
    for entry in sorted(folder.iterdir()):
        if entry.name.endswith("-shm"):
            files[entry.name] = (0, 0, "")
            continue
        digest = hashlib.sha256(entry.read_bytes()).hexdigest()
        files[entry.name] = (entry.stat().st_size, entry.stat().st_mtime_ns, digest)
    return files


def _render_every_page(db: Path, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Every page and the Data page's downloads, with process starts raising; the attempts."""
    attempts: list[str] = []

    def refuse(name: str):
        def call(*args, **kwargs):
            attempts.append(name)
            raise PermissionError(f"the dashboard tried to start a process ({name})")

        return call

    monkeypatch.setenv("RTAX_DB", str(db))
    st.cache_data.clear()
    at = AppTest.from_file(APP, default_timeout=DEADLINE_S)
    with ExitStack() as guard:
        patch = guard.enter_context(pytest.MonkeyPatch.context())
        for module, name in SPAWNERS:
            patch.setattr(module, name, refuse(f"{module.__name__}.{name}"))
        at.run()
        for page in PAGES:
            at.switch_page(page)
            at.run()
            assert not at.exception, (page, [e.value for e in at.exception])
            assert not at.error, (page, [e.value for e in at.error])
            assert at.title, page
        key = (None, (), (), (), ())
        for table in ("runs", "actions"):  # what the download buttons would serve
            assert data.csv_of(str(db), key, table)
    return attempts


@pytest.mark.parametrize("state", ["scheduler-writing", "rollback-journal", "quiescent-wal"])
def test_every_page_runs_no_command_and_writes_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, state: str
) -> None:
    """scheduler-writing: `make run`'s state, a writer holds the file open. rollback-journal: a
    file not in WAL mode (copied by a tool, say), which the old reader switched to WAL.
    quiescent-wal: nobody else has it open, so SQLite's reader makes its coordination files,
    an empty -wal and the -shm, and nothing else."""
    folder = tmp_path / "data"
    folder.mkdir()
    db = folder / "rtax.db"
    _populate(db)
    with ExitStack() as stack:
        if state == "scheduler-writing":
            stack.enter_context(Store(db))
        elif state == "rollback-journal":
            with sqlite3.connect(db) as conn:
                conn.execute("PRAGMA journal_mode = DELETE")
            conn.close()
        before = _snapshot(folder)
        attempts = _render_every_page(db, monkeypatch)
        after = _snapshot(folder)
    assert attempts == [], f"the dashboard tried to start processes: {attempts}"
    if state == "quiescent-wal":
        made = set(after) - set(before)
        assert made <= {"rtax.db-wal", "rtax.db-shm"}, made
        assert "rtax.db-wal" not in made or after["rtax.db-wal"][0] == 0  # empty: no content
        after = {name: v for name, v in after.items() if name not in made and name != "."}
        before = {name: v for name, v in before.items() if name != "."}
    assert after == before


def _older_schema(path: Path) -> None:
    """An rtax file one schema version behind this rtax's, with a run in it."""
    db = sqlite_utils.Database(path)
    for version, migration in migrations.MIGRATIONS[:-1]:
        migration(db)
        db.execute(f"PRAGMA user_version = {version}")
    db.conn.commit()
    db.conn.close()


def test_an_older_schema_is_shown_with_a_message_and_never_migrated(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    db = tmp_path / "rtax.db"
    _older_schema(db)
    before = _snapshot(tmp_path)
    monkeypatch.setenv("RTAX_DB", str(db))
    for page in PAGES:
        st.cache_data.clear()
        at = AppTest.from_file(APP, default_timeout=DEADLINE_S)
        at.run()
        at.switch_page(page)
        at.run()
        assert not at.exception, (page, [e.value for e in at.exception])
        (error,) = at.error
        assert "older than this rtax" in error.value and "never upgraded" in error.value
    with sqlite3.connect(db) as conn:
        version = conn.execute("PRAGMA user_version").fetchone()[0]
    conn.close()
    assert version == migrations.MIGRATIONS[-2][0]  # the version before this rtax's
    assert _snapshot(tmp_path) == before
