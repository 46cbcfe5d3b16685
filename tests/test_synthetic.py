"""The synthetic benchmark database (benchmarks/synthetic.py) holds the rows the record's builders
would make, marked synthetic, in exactly the store's schema.

Why a test: the generator computes its columns on whole arrays (issue 25: a loop per run took 18
minutes for a year of probes), so it no longer goes through `rtax.core.record.run_row` and
`action_row` row by row. Here, from the same random draws, every run and action of a small file
is rebuilt through those builders and compared column by column: a field the record adds or
derives differently shows up as a difference here, not as a benchmark over rows that mean
something else.
"""

from __future__ import annotations

import importlib.util
import json
import sqlite3
from datetime import UTC, datetime
from pathlib import Path
from types import ModuleType

import pytest

from rtax.core.record import ACTION_COLUMNS, RUN_COLUMNS
from rtax.store.database import Store

ROOT = Path(__file__).resolve().parent.parent
RUNS = 2_000
#: Chunks smaller than the file, so that chunk boundaries are crossed too.
CHUNK = 700
SEED = 7
DAYS = 30.0
NOW = datetime(2026, 3, 1, 12, 0, tzinfo=UTC)


def _load() -> ModuleType:
    """benchmarks/synthetic.py, a script beside the package rather than a module of it."""
    spec = importlib.util.spec_from_file_location("synthetic", ROOT / "benchmarks/synthetic.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


synthetic = _load()


def _draws() -> list:
    return list(synthetic.draw(RUNS, seed=SEED, days=DAYS, now=NOW, chunk=CHUNK))


def test_the_vectorised_rows_are_the_record_builders_rows() -> None:
    draws = _draws()
    provenance = synthetic.provenance_of(SEED)
    for d in draws:
        assert synthetic.mismatches(d, provenance) == []
    # The comparison covered every workload, failed runs and ok ones.
    workloads = {int(w) for d in draws for w in d.workload}
    assert workloads == set(range(len(synthetic.WORKLOADS)))
    failed = sum(int(d.failed.sum()) for d in draws)
    assert 0 < failed < RUNS


def test_the_file_holds_those_rows_marked_synthetic_in_the_stores_schema(tmp_path: Path) -> None:
    path = tmp_path / "synthetic.db"
    runs, actions = synthetic.generate(path, RUNS, SEED, DAYS, now=NOW, chunk=CHUNK, progress=False)
    assert runs == RUNS
    provenance = synthetic.provenance_of(SEED)
    conn = sqlite3.connect(path)
    try:
        stored_runs = {
            r[0]: dict(zip(RUN_COLUMNS, r, strict=True))
            for r in conn.execute(f"SELECT {', '.join(RUN_COLUMNS)} FROM runs")
        }
        stored_actions = conn.execute(
            f"SELECT {', '.join(ACTION_COLUMNS)} FROM actions ORDER BY rowid"
        ).fetchall()
        assert len(stored_runs) == RUNS
        assert len(stored_actions) == actions
        # What was stored, read back, is what the builders make of the same draws.
        expected_actions = []
        for d in _draws():
            for k in range(d.index.size):
                run, rows = synthetic.reference(d, k, provenance)
                stored = stored_runs[run["run_id"]]
                assert {c for c in RUN_COLUMNS if not synthetic.same(run[c], stored[c], c)} == set()
                expected_actions += [tuple(a[c] for c in ACTION_COLUMNS) for a in rows]
        assert len(expected_actions) == actions
        for want, got in zip(expected_actions, stored_actions, strict=True):
            assert all(
                synthetic.same(w, g, c) for c, w, g in zip(ACTION_COLUMNS, want, got, strict=True)
            ), (want, got)
        # Synthetic, three ways.
        for run in stored_runs.values():
            assert run["fidelity"] == "modelled"
            assert run["host"] == "synthetic"
            assert json.loads(run["provenance"])["synthetic"] is True
        # Summaries were rebuilt over every run (each has a wall_s day row).
        (summarized,) = conn.execute(
            "SELECT sum(runs) FROM summaries WHERE metric = 'wall_s' AND bucket = 'day'"
        ).fetchone()
        assert summarized == RUNS
        made = _schema(conn)
    finally:
        conn.close()
    fresh = tmp_path / "fresh.db"
    Store(fresh).close()
    with sqlite3.connect(fresh) as conn:
        assert made == _schema(conn)


def _schema(conn: sqlite3.Connection) -> dict[str, object]:
    """Every table and index statement, the schema version, journal and vacuum modes."""
    return {
        "objects": sorted(conn.execute("SELECT type, name, tbl_name, sql FROM sqlite_master")),
        **{
            pragma: conn.execute(f"PRAGMA {pragma}").fetchone()[0]
            for pragma in ("user_version", "journal_mode", "auto_vacuum", "page_size")
        },
    }


def test_it_refuses_the_default_database(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    default = tmp_path / "rtax.db"
    default.write_bytes(b"not to be touched")
    monkeypatch.setenv("RTAX_DB", str(default))
    with pytest.raises(SystemExit, match="refusing"):
        synthetic.generate(default, 10, progress=False)
    assert default.read_bytes() == b"not to be touched"
