"""A rollout that finished is never lost because the database was busy or full (issue 12): both
writers retry, then spool (beside the database, else in the spool dir, else in memory), and
the next start of either replays each record once and never a partial one
(docs/measurement.md#failures)."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterator
from pathlib import Path

import pytest

from factories import make_record
from rtax import cli
from rtax.rollouts import probe
from rtax.store.database import Store
from rtax.store.spool import MEMORY, Spool


@pytest.fixture(autouse=True)
def isolated(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RTAX_LOCAL_ROOT", str(tmp_path / "envs"))
    monkeypatch.setenv("RTAX_SPOOL_DIR", str(tmp_path / "state"))
    monkeypatch.setenv("RTAX_BUSY_TIMEOUT", "0.1")  # a busy database fails fast here


@pytest.fixture
def db(tmp_path: Path) -> Path:
    path = tmp_path / "rtax.db"
    Store(path).close()
    return path


@pytest.fixture
def writer_holding_the_lock(db: Path) -> Iterator[sqlite3.Connection]:
    """Another writer in the middle of a transaction: the database is busy until released."""
    conn = sqlite3.connect(db, isolation_level=None)
    conn.execute("BEGIN IMMEDIATE")
    yield conn
    if conn.in_transaction:
        conn.execute("ROLLBACK")
    conn.close()


def run_ids(db: Path) -> list[str]:
    with sqlite3.connect(db) as conn:
        return sorted(r[0] for r in conn.execute("SELECT run_id FROM runs"))


def test_probe_keeps_rollouts_the_busy_database_could_not_take_then_writes_them(
    db: Path, writer_holding_the_lock: sqlite3.Connection, capsys: pytest.CaptureFixture
) -> None:
    code = cli.main(["probe", "--substrate", "local", "--repeat", "2", "--db", str(db), "--quiet"])
    err = capsys.readouterr().err
    assert code == cli.EXIT_NOT_STORED  # measured and kept, but not in the database yet
    assert err.splitlines() == [
        f"rtax probe: database busy or unavailable: 2 rollouts spooled to {db}.spool.jsonl, "
        f"not yet in {db}; the next rtax probe or rtax schedule on it writes them"
    ]
    writer_holding_the_lock.execute("ROLLBACK")
    assert run_ids(db) == []

    done = probe.probe(probe.Probe("local", repeat=1, db=db))  # the next start writes them first
    assert not done.spooled and done.replayed == 2
    assert len(run_ids(db)) == 3
    assert not Path(f"{db}.spool.jsonl").exists()


def test_a_rollout_spooled_then_written_by_the_next_save_is_reported_stored(
    db: Path,
    writer_holding_the_lock: sqlite3.Connection,
    capsys: pytest.CaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The first rollout meets a busy database and is spooled; the other writer is done by the
    second, whose save writes both: the probe stored everything, says nothing of a spool and
    exits 0 (it used to report the first as spooled to a file that no longer exists)."""
    real = probe.run_rollout
    calls = []

    def second_after_release(*args, **kwargs):  # type: ignore[no-untyped-def]
        calls.append(1)
        if len(calls) == 2:
            writer_holding_the_lock.execute("ROLLBACK")
        return real(*args, **kwargs)

    monkeypatch.setattr(probe, "run_rollout", second_after_release)
    code = cli.main(["probe", "--substrate", "local", "--repeat", "2", "--db", str(db), "--quiet"])
    err = capsys.readouterr().err
    assert len(run_ids(db)) == 2
    assert not Path(f"{db}.spool.jsonl").exists()
    assert "spooled" not in err and "lost" not in err
    assert code == 0


def test_a_busy_database_is_retried_before_anything_is_spooled(
    db: Path, writer_holding_the_lock: sqlite3.Connection
) -> None:
    opened = []

    def open_store() -> Store:
        opened.append(1)
        if len(opened) == 2:  # the other writer commits while the first attempt backs off
            writer_holding_the_lock.execute("COMMIT")
        return Store(db)

    spool = Spool(db, open_store)
    assert spool.save(make_record("r1")) is None
    assert run_ids(db) == ["r1"]
    assert spool.spooled() == 0 and len(opened) == 2


def test_a_full_disk_under_the_database_spools_to_the_spool_dir_and_start_replays_it(
    tmp_path: Path, db: Path, writer_holding_the_lock: sqlite3.Connection
) -> None:
    # Neither the database nor a file beside it can be written (a folder stands in the
    # spool's place): the record goes to the second location, on another file system.
    Path(f"{db}.spool.jsonl").mkdir()
    spool = Spool(db, lambda: Store(db))
    where = spool.save(make_record("r1"))
    assert where == str(spool.fallback)
    assert spool.fallback.parent == tmp_path / "state"
    writer_holding_the_lock.execute("ROLLBACK")
    Path(f"{db}.spool.jsonl").rmdir()

    with Store(db) as store:  # a new process's start
        assert Spool(db, lambda: Store(db)).replay(store) == 1
    assert run_ids(db) == ["r1"] and not spool.fallback.exists()


def test_with_no_writable_spool_a_record_is_held_and_written_before_the_next(
    tmp_path: Path, db: Path, writer_holding_the_lock: sqlite3.Connection, monkeypatch
) -> None:
    Path(f"{db}.spool.jsonl").mkdir()
    (tmp_path / "state").write_text("not a folder")  # the spool dir can't be made either
    spool = Spool(db, lambda: Store(db))
    assert spool.save(make_record("r1")) == MEMORY
    writer_holding_the_lock.execute("ROLLBACK")
    assert spool.save(make_record("r2")) is None
    assert run_ids(db) == ["r1", "r2"] and not spool.pending


def test_replay_writes_each_record_once_and_never_a_cut_short_one(db: Path) -> None:
    spool = Spool(db, lambda: Store(db))
    whole = json.dumps({"run": make_record("r1").run, "actions": make_record("r1").actions})
    again = json.dumps({"run": make_record("r2").run, "actions": make_record("r2").actions})
    spool.path.write_text(f"{whole}\n{whole[:-40]}")  # the second append was cut short
    spool.fallback.parent.mkdir(parents=True)
    spool.fallback.write_text(f"\n{again}\n")
    with Store(db) as store:
        store.save_rollout(make_record("r2"))  # written before a crash removed the file
        assert spool.replay(store) == 1
        actions = store.runs.actions(run_id="r1")
    assert run_ids(db) == ["r1", "r2"]
    assert len(actions) == len(make_record("r1").actions)
    assert spool.spooled() == 0


def test_a_record_appended_after_a_cut_short_line_is_whole(db: Path) -> None:
    spool = Spool(db, lambda: Store(db))
    whole = json.dumps({"run": make_record("r1").run, "actions": make_record("r1").actions})
    spool.path.write_text(whole[:-40])  # a crash mid-append, no newline
    with sqlite3.connect(db, isolation_level=None) as conn:
        conn.execute("BEGIN IMMEDIATE")
        assert spool.save(make_record("r2")) == str(spool.path)
        conn.execute("ROLLBACK")
    with Store(db) as store:
        assert spool.replay(store) == 1
    assert run_ids(db) == ["r2"]


def test_a_record_the_database_refuses_for_good_is_kept_apart_and_blocks_nothing(
    db: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A spooled record SQLite can't bind (a corrupt line: an object where text belongs) is
    moved to the rejected file with the reason; the records after it are written, and the
    next replay has nothing left to trip on. The old replay raised at it every time."""
    spool = Spool(db, lambda: Store(db))
    bad = make_record("bad")
    bad.run["host"] = {"not": "text"}
    lines = [
        json.dumps({"run": r.run, "actions": r.actions})
        for r in (make_record("r1"), bad, make_record("r2"))
    ]
    spool.path.write_text("\n".join(lines) + "\n")
    with Store(db) as store:
        assert spool.replay(store) == 2
        assert spool.replay(store) == 0
    assert run_ids(db) == ["r1", "r2"]
    assert spool.spooled() == 0 and not spool.path.exists()
    kept = [json.loads(x) for x in spool.rejected.read_text().splitlines() if x.strip()]
    assert [k["run"]["run_id"] for k in kept] == ["bad"]
    assert "binding" in kept[0]["refused"].lower() or "type" in kept[0]["refused"].lower()
    assert any("refuses run bad for good" in r.getMessage() for r in caplog.records)
    # a new record refused at once is kept apart too, never spooled for retries
    again = make_record("bad2")
    again.run["host"] = ["no"]
    assert spool.save(again) == str(spool.rejected)
    assert not spool.path.exists()
