"""The store's load runs (rtax.store.loads) and schema version 9: a load run written as it
starts and finished as it ends, its rollouts linked by ``load_id``, and a version-8 file
upgraded with its runs kept."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest
import sqlite_utils

from factories import make_record, make_run
from rtax.store import LOAD_RUN_COLUMNS, Store, migrations


def _identity(load_id: str, **overrides) -> dict:
    return {
        "load_id": load_id,
        "name": None,
        "substrate": "docker",
        "kind": "docker",
        "mode": "exec",
        "fidelity": "real",
        "tier": "T0",
        "steps": 0,
        "shape": "burst",
        "n": 2,
        "started_at": "2026-01-01T00:00:00+00:00",
        **overrides,
    }


def test_a_load_run_is_written_at_its_start_and_finished_at_its_end(store: Store) -> None:
    store.loads.begin(_identity("L1"))
    row = store.loads.read().iloc[0]
    assert row["status"] == "running" and row["rollouts"] is None  # a dead process says so
    for i in range(2):
        store.save_rollout(make_record(f"r{i}", load_id="L1", load_index=1 - i))
    store.save_rollout(make_record("other"))
    store.loads.finish("L1", {"status": "complete", "rollouts": 2, "creates_per_s": 4.5})
    row = store.loads.read(load_id="L1").iloc[0]
    assert (row["status"], row["rollouts"], row["creates_per_s"]) == ("complete", 2, 4.5)
    rollouts = store.loads.rollouts(["L1"])
    assert rollouts["run_id"].tolist() == ["r1", "r0"]  # in launch order
    assert rollouts["load_index"].tolist() == [0, 1]
    assert store.loads.rollouts([]).empty


def test_load_runs_filter_and_order(store: Store) -> None:
    store.loads.begin(_identity("b", started_at="2026-01-02T00:00:00+00:00"))
    store.loads.begin(_identity("a", substrate="local", started_at="2026-01-01T00:00:00+00:00"))
    assert store.loads.read()["load_id"].tolist() == ["a", "b"]
    assert store.loads.read(substrate="local")["load_id"].tolist() == ["a"]
    assert store.loads.read(since="2026-01-01T12:00:00+00:00")["load_id"].tolist() == ["b"]
    assert store.loads.read(substrate=["local", "docker"], tier=None).shape[0] == 2
    with pytest.raises(ValueError, match="unknown filter"):
        store.loads.read(plan="x")


def test_mistakes_are_refused(store: Store) -> None:
    with pytest.raises(ValueError, match="not a load run column: colour"):
        store.loads.begin({**_identity("x"), "colour": "red"})
    with pytest.raises(sqlite3.IntegrityError):
        store.loads.begin(_identity("x", shape="wave"))
    store.loads.begin(_identity("x"))
    with pytest.raises(ValueError, match="not a load run figure: load_id"):
        store.loads.finish("x", {"load_id": "y"})
    with pytest.raises(ValueError, match="no load run 'nope'"):
        store.loads.finish("nope", {"status": "complete"})
    with pytest.raises(sqlite3.IntegrityError):
        store.loads.finish("x", {"status": "half-done"})


def test_a_version_8_file_is_upgraded_and_keeps_its_runs(tmp_path: Path) -> None:
    path = tmp_path / "v8.db"
    db = sqlite_utils.Database(path)
    for version, migration in migrations.MIGRATIONS:
        if version <= 8:
            migration(db)
    db.execute("PRAGMA user_version = 8")
    old = make_run("old", started_at="2025-06-01T00:00:00+00:00")
    have = db["runs"].columns_dict
    db["runs"].insert({k: v for k, v in old.items() if k in have})
    db.conn.commit()
    db.conn.close()
    with Store(path) as store:
        assert store.version == migrations.SCHEMA_VERSION >= 9
        runs = store.runs.read()
        assert runs["run_id"].tolist() == ["old"]
        assert runs.iloc[0]["load_id"] is None and runs.iloc[0]["load_index"] is None
        assert store.loads.read().empty
        assert list(store.loads.read().columns) == list(LOAD_RUN_COLUMNS)
        indexes = {tuple(i.columns) for i in store.db["runs"].indexes}
        assert ("load_id", "load_index") in indexes
        store.loads.begin(_identity("L"))
        store.save_rollout(make_record("new", load_id="L", load_index=0))
        assert store.loads.rollouts(["L"])["run_id"].tolist() == ["new"]


def test_a_read_only_store_reads_load_runs(db_path: Path) -> None:
    with Store(db_path) as store:
        store.loads.begin(_identity("L"))
    with Store(db_path, read_only=True) as reader:
        assert reader.loads.read()["load_id"].tolist() == ["L"]
