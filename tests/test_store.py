"""rtax.store.Store and its tables on fresh temporary databases: schema, writes, reads, filters,
migrations and the errors that must come out as StoreError (one readable line), never as a raw
sqlite3 error."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
import sqlite_utils

from factories import make_action, make_record, make_run
from rtax.core.record import ACTION_COLUMNS, RUN_COLUMNS, RolloutRecord
from rtax.store import Store, StoreError, frozen, migrations
from rtax.store import database as store_module
from rtax.store import summaries as store_summaries
from rtax.store.migrations import SCHEMA_VERSION

# -- helpers ---------------------------------------------------------------------------------


def raw(path: Path) -> sqlite3.Connection:
    """A plain sqlite3 connection, to look at the file without going through Store."""
    return sqlite3.connect(str(path))


# -- schema ----------------------------------------------------------------------------------


def test_new_database_has_current_schema_and_wal(store: Store, db_path: Path) -> None:
    assert db_path.is_file()
    assert store.version == SCHEMA_VERSION
    assert store.db.journal_mode == "wal"
    assert set(store.db.table_names()) >= {"runs", "actions"}
    assert list(store.db["runs"].columns_dict) == list(RUN_COLUMNS)
    assert list(store.db["actions"].columns_dict) == list(ACTION_COLUMNS)
    assert store.runs.count() == 0 and store.runs.count_actions() == 0
    with raw(db_path) as conn:
        assert conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"


def test_reopening_applies_no_migration_and_keeps_rows(db_path: Path) -> None:
    with Store(db_path) as s:
        s.save_rollout(make_record("r1"))
    with Store(db_path) as s:
        assert s.migrate() == []
        assert s.version == SCHEMA_VERSION
        assert s.runs.read()["run_id"].tolist() == ["r1"]


# -- writing and reading ---------------------------------------------------------------------


def test_save_rollout_writes_one_run_and_its_actions(store: Store) -> None:
    record = make_record("r1", phases=("ready", "ready", "setup", "action", "action"))
    store.save_rollout(record)
    assert store.runs.count() == 1
    assert store.runs.count_actions() == 5

    runs = store.runs.read()
    assert isinstance(runs, pd.DataFrame)
    assert len(runs) == 1
    row = runs.iloc[0]
    for key, value in record.run.items():
        if isinstance(value, float):
            assert row[key] == pytest.approx(value), key
        elif value is None:
            assert pd.isna(row[key]), key
        else:
            assert row[key] == value, key

    actions = store.runs.actions()
    assert isinstance(actions, pd.DataFrame)
    assert actions["seq"].tolist() == [0, 1, 2, 3, 4]
    assert actions["phase"].tolist() == ["ready", "ready", "setup", "action", "action"]
    assert (actions["run_id"] == "r1").all()
    assert actions["latency_s"].tolist() == pytest.approx([a["latency_s"] for a in record.actions])
    assert actions["command"].tolist() == [a["command"] for a in record.actions]
    # The run's grouping columns come along with each action.
    assert (actions["substrate"] == "local").all()
    assert (actions["tier"] == "T0").all()
    assert (actions["run_status"] == "ok").all()
    assert (actions["mode"] == "exec").all()
    assert (actions["run_started_at"] == record.run["started_at"]).all()


def test_save_rollout_without_mode_defaults_to_exec(store: Store) -> None:
    record = make_record("r1")
    del record.run["mode"]
    store.save_rollout(record)
    assert store.runs.read()["mode"].tolist() == ["exec"]


def test_save_rollout_keeps_a_failed_run_with_its_error(store: Store) -> None:
    record = make_record(
        "bad",
        phases=("ready",),
        status="failed",
        error_class="ready_timeout",
        error_message="no successful 'true'",
        episode_s=None,
        time_to_first_command_s=None,
    )
    record.actions[0].update(ok=0, error_class="action_timeout", exit_code=None, exec_s=None)
    store.save_rollout(record)
    run = store.runs.read().iloc[0]
    assert (run["status"], run["error_class"]) == ("failed", "ready_timeout")
    assert pd.isna(run["episode_s"])
    action = store.runs.actions().iloc[0]
    assert (action["ok"], action["error_class"]) == (0, "action_timeout")
    assert pd.isna(action["exit_code"])


def test_runs_are_ordered_oldest_first(store: Store) -> None:
    store.save_rollout(make_record("b", started_at="2025-01-03T00:00:00+00:00"))
    store.save_rollout(make_record("a", started_at="2025-01-02T00:00:00+00:00"))
    store.save_rollout(make_record("c", started_at="2025-01-01T00:00:00+00:00"))
    assert store.runs.read()["run_id"].tolist() == ["c", "a", "b"]
    assert store.runs.actions()["run_id"].tolist() == ["c", "c", "a", "a", "b", "b"]


def test_empty_reads_are_empty_frames_with_columns(store: Store) -> None:
    runs = store.runs.read()
    assert runs.empty and "run_id" in runs.columns and "mode" in runs.columns
    actions = store.runs.actions()
    assert actions.empty and "latency_s" in actions.columns


# -- filters ---------------------------------------------------------------------------------


@pytest.fixture
def filled(store: Store) -> Store:
    """Five runs that differ in substrate, tier, steps, fidelity, status and start time."""
    specs = [
        ("r1", "local", "T0", 0, "real", "ok", "2025-01-01T00:00:00+00:00"),
        ("r2", "local", "T1", 0, "real", "ok", "2025-01-02T00:00:00+00:00"),
        ("r3", "docker", "T2", 10, "real", "failed", "2025-01-03T00:00:00+00:00"),
        ("r4", "docker", "T2", 50, "simulated", "ok", "2025-01-04T00:00:00+00:00"),
        ("r5", "modal", "T2", 10, "real", "ok", "2025-01-05T00:00:00+00:00"),
    ]
    for run_id, substrate, tier, steps, fidelity, status, started in specs:
        store.save_rollout(
            make_record(
                run_id,
                phases=("ready", "setup", "action"),
                substrate=substrate,
                kind=substrate,
                tier=tier,
                steps=steps,
                fidelity=fidelity,
                status=status,
                started_at=started,
            )
        )
    return store


def ids(frame: pd.DataFrame) -> list[str]:
    return frame["run_id"].drop_duplicates().tolist()


@pytest.mark.parametrize(
    ("filters", "expected"),
    [
        ({}, ["r1", "r2", "r3", "r4", "r5"]),
        ({"substrate": "docker"}, ["r3", "r4"]),
        ({"tier": "T2"}, ["r3", "r4", "r5"]),
        ({"steps": 10}, ["r3", "r5"]),
        ({"substrate": ["local", "modal"]}, ["r1", "r2", "r5"]),
        ({"tier": ("T0", "T1")}, ["r1", "r2"]),
        ({"steps": [10, 50]}, ["r3", "r4", "r5"]),
        ({"tier": "T2", "steps": 10}, ["r3", "r5"]),
        ({"fidelity": "simulated"}, ["r4"]),
        ({"status": "failed"}, ["r3"]),
        ({"status": "ok", "substrate": "docker"}, ["r4"]),
        ({"kind": "modal"}, ["r5"]),
        ({"run_id": "r2"}, ["r2"]),
        ({"since": "2025-01-03T00:00:00+00:00"}, ["r3", "r4", "r5"]),  # inclusive
        ({"until": "2025-01-03T00:00:00+00:00"}, ["r1", "r2"]),  # exclusive
        (
            {"since": "2025-01-02T00:00:00+00:00", "until": "2025-01-04T00:00:00+00:00"},
            ["r2", "r3"],
        ),
        ({"substrate": None, "tier": None}, ["r1", "r2", "r3", "r4", "r5"]),  # None: no filter
        ({"substrate": "nope"}, []),
        ({"substrate": []}, []),
    ],
)
def test_filters(filled: Store, filters: dict[str, Any], expected: list[str]) -> None:
    assert ids(filled.runs.read(**filters)) == expected
    assert ids(filled.runs.actions(**filters)) == expected


def test_actions_phase_filter(filled: Store) -> None:
    setup = filled.runs.actions(phase="setup")
    assert len(setup) == 5
    assert set(setup["phase"]) == {"setup"}
    both = filled.runs.actions(phase=["ready", "action"], substrate="docker")
    assert len(both) == 4
    assert set(both["phase"]) == {"ready", "action"}
    assert ids(both) == ["r3", "r4"]
    assert filled.runs.actions(phase="nope").empty
    assert len(filled.runs.actions(phase=None)) == 15


@pytest.mark.parametrize("method", ["read", "actions"])
def test_unknown_filter_raises_store_error(filled: Store, method: str) -> None:
    with pytest.raises(StoreError, match="unknown filter 'colour'"):
        getattr(filled.runs, method)(colour="red")


def test_phase_is_not_a_runs_filter(filled: Store) -> None:
    with pytest.raises(StoreError, match="unknown filter 'phase'"):
        filled.runs.read(phase="setup")


def test_internal_phase_key_is_not_a_runs_filter(filled: Store) -> None:
    with pytest.raises(StoreError, match="unknown filter"):
        filled.runs.read(_phase="setup")


def test_filter_values_are_parameters_not_sql(filled: Store) -> None:
    assert filled.runs.read(substrate="local' OR '1'='1").empty
    assert filled.runs.count() == 5


def test_count_unknown_table(store: Store) -> None:
    # Counting names no table any more (store.runs.count, store.runs.count_actions); where a
    # caller still names one (the CSV export) or a column (a filter), it never reaches SQL.
    with pytest.raises(StoreError, match="unknown table"):
        list(store.runs.csv_chunks("sqlite_master"))
    with pytest.raises(StoreError, match="unknown filter"):
        store.runs.count(sqlite_master="x")


# -- atomicity and integrity -----------------------------------------------------------------


def test_save_rollout_is_all_or_nothing(store: Store, db_path: Path) -> None:
    store.save_rollout(make_record("before", started_at="2025-01-01T00:00:00+00:00"))
    record = make_record("broken", phases=("ready", "action", "action"))
    record.actions[2]["seq"] = 1  # (run_id, seq) is the primary key: a duplicate
    with pytest.raises((sqlite3.IntegrityError, StoreError)):
        store.save_rollout(record)
    assert store.runs.read()["run_id"].tolist() == ["before"]
    assert store.runs.actions(run_id="broken").empty
    assert store.runs.count_actions() == 2
    # Nothing is left half-written on disk either (seen from another connection).
    with raw(db_path) as conn:
        assert conn.execute("SELECT count(*) FROM runs WHERE run_id='broken'").fetchone() == (0,)
        assert conn.execute("SELECT count(*) FROM actions WHERE run_id='broken'").fetchone() == (0,)
    # ... and the store is still usable.
    store.save_rollout(make_record("after", started_at="2025-01-02T00:00:00+00:00"))
    assert store.runs.read()["run_id"].tolist() == ["before", "after"]


def test_saving_the_same_run_id_twice_keeps_the_first(store: Store) -> None:
    store.save_rollout(make_record("r1", phases=("ready", "action"), episode_s=1.5))
    second = make_record("r1", phases=("ready", "action", "action"), episode_s=99.0)
    second.actions = [make_action("r1", i + 10) for i in range(3)]  # new seqs: only the run clashes
    with pytest.raises((sqlite3.IntegrityError, StoreError)):
        store.save_rollout(second)
    runs = store.runs.read()
    assert len(runs) == 1
    assert runs.iloc[0]["episode_s"] == pytest.approx(1.5)
    assert store.runs.actions()["seq"].tolist() == [0, 1]


def test_action_of_an_unknown_run_is_refused(store: Store) -> None:
    record = make_record("r1")
    record.actions[1]["run_id"] = "ghost"  # foreign key to runs
    with pytest.raises((sqlite3.IntegrityError, StoreError)):
        store.save_rollout(record)
    assert store.runs.count() == 0
    assert store.runs.count_actions() == 0


def test_run_without_substrate_is_refused(store: Store) -> None:
    with pytest.raises((sqlite3.IntegrityError, StoreError)):
        store.save_rollout(make_record("r1", substrate=None))
    assert store.runs.count() == 0


# -- migrations ------------------------------------------------------------------------------


def _make_v1_file(path: Path) -> None:
    """An rtax database as version 1 wrote it: no `mode` column, no indexes."""
    db = sqlite_utils.Database(path)
    migrations._v1(db)
    db.execute("PRAGMA user_version = 1")
    _insert_as_of(db, make_run("old-run", started_at="2024-06-01T12:00:00+00:00", episode_s=2.5))
    db.conn.commit()
    db.conn.close()


def _insert_as_of(db: sqlite_utils.Database, run: dict[str, Any]) -> None:
    """`run` and one ready action, as a file of `db`'s version held them (its columns only)."""
    have = db["runs"].columns_dict
    db["runs"].insert({k: v for k, v in run.items() if k in have})
    action = make_action(run["run_id"], 0, "ready")
    have = db["actions"].columns_dict
    db["actions"].insert({k: v for k, v in action.items() if k in have})


def test_v1_file_is_upgraded(db_path: Path) -> None:
    _make_v1_file(db_path)
    with raw(db_path) as conn:
        assert conn.execute("PRAGMA user_version").fetchone()[0] == 1
        columns = [r[1] for r in conn.execute("PRAGMA table_info(runs)")]
        assert "mode" not in columns

    with Store(db_path) as s:
        assert s.version == SCHEMA_VERSION
        runs = s.runs.read()
        assert runs["run_id"].tolist() == ["old-run"]
        assert runs.iloc[0]["mode"] == "exec"
        assert runs.iloc[0]["episode_s"] == pytest.approx(2.5)
        assert s.runs.actions()["run_id"].tolist() == ["old-run"]
        index_columns = {tuple(i.columns) for i in s.db["runs"].indexes}
        assert ("substrate", "tier", "steps", "started_at") in index_columns
        assert ("started_at",) in index_columns
        assert ("fidelity", "status") in index_columns
        assert s.db.journal_mode == "wal"
        # New rows can be written beside the old one.
        s.save_rollout(make_record("new-run", mode="session"))
        assert s.runs.read()["mode"].tolist() == ["exec", "session"]

    with raw(db_path) as conn:
        assert conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION


def test_v4_file_gains_resolution_columns_and_keeps_old_rows(db_path: Path) -> None:
    """A file written before resolution was recorded (v4): its rows keep NULL, which means
    "not recorded", and new rows carry their resolutions (docs/measurement.md#resolution)."""
    db = sqlite_utils.Database(db_path)
    for version, migration in migrations.MIGRATIONS:
        if version <= 4:
            migration(db)
    db.execute("PRAGMA user_version = 4")
    _insert_as_of(db, make_run("old-run", started_at="2024-06-01T12:00:00+00:00"))
    db.conn.commit()
    db.conn.close()

    with Store(db_path) as s:
        assert s.version == SCHEMA_VERSION
        s.save_rollout(
            RolloutRecord(
                run=make_run(
                    "new-run", orchestration_res_s=0.25, actions_res_s=0.1, cleanup_res_s=0.0
                ),
                actions=[
                    make_action("new-run", 0, "ready"),
                    make_action("new-run", 1, "action", resolution_s=0.05),
                    make_action("new-run", 2, "action", resolution_s=0.05),
                ],
            )
        )
        runs = s.runs.read().set_index("run_id")
        assert pd.isna(runs.loc["old-run", "orchestration_res_s"])
        assert runs.loc["new-run", "orchestration_res_s"] == pytest.approx(0.25)
        assert runs.loc["new-run", "cleanup_res_s"] == 0.0
        assert pd.isna(runs.loc["new-run", "create_res_s"])
        actions = s.runs.actions()
        old_res = actions[actions["run_id"] == "old-run"]["resolution_s"]
        new_res = actions[actions["run_id"] == "new-run"]["resolution_s"]
        assert old_res.isna().all() and len(old_res) == 1
        assert new_res.isna().tolist() == [True, False, False]
        assert new_res.iloc[1:].tolist() == pytest.approx([0.05, 0.05])


def _warm(run_id: str, claim_s: float, **overrides: Any) -> RolloutRecord:
    """A warm run: claimed from a pool, so no create, orchestration or ready of its own."""
    run = make_run(
        run_id,
        launch_type="warm",
        create_s=None,
        orchestration_s=None,
        ready_s=None,
        claim_s=claim_s,
        time_to_first_command_s=claim_s,
        **overrides,
    )
    return RolloutRecord(run=run, actions=[make_action(run_id, 0, "action")])


def test_v8_file_gains_launch_types_its_rows_cold_and_its_rollups_kept(db_path: Path) -> None:
    """A file from before warm pools (v8): its runs and rollups are cold; warm runs saved after
    the upgrade summarize apart from them (docs/measurement.md#warm-pools)."""
    db = sqlite_utils.Database(db_path)
    for version, migration in migrations.MIGRATIONS:
        if version <= 8:
            migration(db)
    db.execute("PRAGMA user_version = 8")
    _insert_as_of(db, make_run("old-run", started_at="2024-06-01T12:00:00+00:00"))
    rollup = dict.fromkeys(c for c in frozen.V4_ROLLUP_COLUMNS)
    rollup.update(substrate="docker", kind="docker", mode="exec", fidelity="real", tier="T0")
    rollup.update(steps=0, bucket="day", bucket_start="2024-01-01T00:00:00.000000+00:00")
    rollup.update(metric="wall_s", runs=3, n=3, sum=0.75, sketch='{"v": [0.25, 0.25, 0.25]}')
    db["rollups"].insert(rollup)
    db.conn.commit()
    db.conn.close()

    with Store(db_path) as s:
        assert s.version == SCHEMA_VERSION
        (kept,) = s.rollups.read().to_dict("records")
        assert (kept["launch_type"], kept["runs"], kept["sum"]) == ("cold", 3, 0.75)
        s.save_rollout(make_record("cold-run", started_at="2024-06-01T12:10:00+00:00"))
        s.save_rollout(_warm("warm-run", 0.004, started_at="2024-06-01T12:20:00+00:00"))
        runs = s.runs.read().set_index("run_id")
        assert runs["launch_type"].to_dict() == {
            "old-run": "cold",
            "cold-run": "cold",
            "warm-run": "warm",
        }
        assert pd.isna(runs.loc["old-run", "claim_s"])
        rows = s.summaries.read(metrics=["time_to_first_command_s"])
        rows = rows[(rows["bucket"] == "month") & (rows["substrate"] == "local")]
        by_launch = rows.set_index("launch_type")[["runs", "n", "sum"]].to_dict("index")
        # two series: the cold ones' 0.06 s each (factory phases), the warm one's claim
        assert by_launch["cold"]["n"] == 2
        assert by_launch["cold"]["sum"] == pytest.approx(0.12)
        assert by_launch["warm"] == {"runs": 1, "n": 1, "sum": pytest.approx(0.004)}
        claims = s.summaries.read(metrics=["claim_s", "create_s"])
        claims = claims[(claims["bucket"] == "month") & (claims["substrate"] == "local")]
        # a phase its launch type lacks is no metric of it: no cold claim, no warm create
        assert sorted(zip(claims["metric"], claims["launch_type"], strict=True)) == [
            ("claim_s", "warm"),
            ("create_s", "cold"),
        ]


def test_export_carries_resolution(store: Store, tmp_path: Path) -> None:
    store.save_rollout(
        RolloutRecord(
            run=make_run("r1", ready_res_s=0.02),
            actions=[make_action("r1", 0, "action", resolution_s=0.05)],
        )
    )
    runs_csv, actions_csv = tmp_path / "runs.csv", tmp_path / "actions.csv"
    store.runs.export_csv("runs", runs_csv)
    store.runs.export_csv("actions", actions_csv)
    assert pd.read_csv(runs_csv)["ready_res_s"].tolist() == [0.02]
    assert pd.read_csv(actions_csv)["resolution_s"].tolist() == [0.05]


def test_migrate_reports_versions_applied(db_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _make_v1_file(db_path)
    applied: list[int] = []
    real = store_module.Store.migrate

    def spy(self: Store) -> list[int]:
        result = real(self)
        applied.extend(result)
        return result

    monkeypatch.setattr(store_module.Store, "migrate", spy)
    Store(db_path).close()
    Store(db_path).close()
    # from v1 up, once each, then nothing
    assert (
        applied == [v for v, _ in migrations.MIGRATIONS if v > 1] and applied[-1] == SCHEMA_VERSION
    )


def test_failed_migration_leaves_the_file_openable(
    db_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _make_v1_file(db_path)

    def half_v2(db: sqlite_utils.Database) -> None:
        db["runs"].add_column("mode", str, not_null_default="exec")
        raise sqlite3.OperationalError("disk I/O error (simulated, after the first DDL)")

    monkeypatch.setattr(store_module, "MIGRATIONS", ((1, migrations._v1), (2, half_v2)))
    with pytest.raises(StoreError):
        Store(db_path)
    monkeypatch.undo()
    with Store(db_path) as s:  # rolled back whole, so v2 applies cleanly now
        assert s.version == SCHEMA_VERSION


def test_newer_file_is_refused(db_path: Path) -> None:
    with raw(db_path) as conn:
        conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
    with pytest.raises(StoreError, match="newer") as info:
        Store(db_path)
    assert str(db_path) in str(info.value)
    with raw(db_path) as conn:  # left alone, not migrated
        assert conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION + 1
        assert conn.execute("SELECT count(*) FROM sqlite_master").fetchone()[0] == 0


# -- files that can't be used ----------------------------------------------------------------


def test_non_sqlite_file_is_refused(db_path: Path) -> None:
    garbage = b"this is not a database\x00\xff\xfe" * 200
    db_path.write_bytes(garbage)
    with pytest.raises(StoreError, match="cannot use") as info:
        Store(db_path)
    assert str(db_path) in str(info.value)
    assert db_path.read_bytes() == garbage  # not overwritten


def test_missing_folder_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "no" / "such" / "folder" / "rtax.db"
    with pytest.raises(StoreError, match="does not exist"):
        Store(path)
    assert not path.parent.exists()  # not created behind the user's back


def test_create_false_on_missing_file(tmp_path: Path) -> None:
    path = tmp_path / "absent.db"
    with pytest.raises(StoreError, match="no database"):
        Store(path, create=False)
    assert not path.exists()


def test_create_false_opens_an_existing_file(db_path: Path) -> None:
    with Store(db_path) as s:
        s.save_rollout(make_record("r1"))
    with Store(db_path, create=False) as s:
        assert s.runs.read()["run_id"].tolist() == ["r1"]


def test_folder_as_database_is_refused(tmp_path: Path) -> None:
    folder = tmp_path / "adir"
    folder.mkdir()
    with pytest.raises(StoreError):
        Store(folder)


# -- export ----------------------------------------------------------------------------------


def test_export_runs_csv(filled: Store, tmp_path: Path) -> None:
    out = tmp_path / "runs.csv"
    assert filled.runs.export_csv("runs", out) == 5
    frame = pd.read_csv(out)
    assert len(frame) == 5
    assert frame["run_id"].tolist() == ["r1", "r2", "r3", "r4", "r5"]
    assert list(frame.columns) == list(RUN_COLUMNS)


def test_export_with_filters(filled: Store, tmp_path: Path) -> None:
    out = tmp_path / "runs.csv"
    assert filled.runs.export_csv("runs", out, substrate="docker", tier=None) == 2
    assert pd.read_csv(out)["run_id"].tolist() == ["r3", "r4"]


def test_export_actions_csv(filled: Store, tmp_path: Path) -> None:
    out = tmp_path / "actions.csv"
    assert filled.runs.export_csv("actions", out, tier="T2") == 9
    frame = pd.read_csv(out)
    assert len(frame) == 9
    assert frame["run_id"].drop_duplicates().tolist() == ["r3", "r4", "r5"]
    assert {"seq", "phase", "latency_s", "substrate"} <= set(frame.columns)


def test_export_unknown_table(filled: Store, tmp_path: Path) -> None:
    out = tmp_path / "x.csv"
    with pytest.raises(StoreError, match="unknown table"):
        filled.runs.export_csv("bogus", out)
    assert not out.exists()


def test_export_counts_rows_not_lines(store: Store, tmp_path: Path) -> None:
    """A T2 action carries its patch in a heredoc: one row, many lines."""
    record = make_record("multi", phases=("ready", "action"))
    record.actions[1]["command"] = "git apply - <<'EOF'\nline one\nline two\nEOF"
    store.save_rollout(record)
    out = tmp_path / "actions.csv"
    assert store.runs.export_csv("actions", out) == 2
    back = pd.read_csv(out)
    assert len(back) == 2 and back["command"].iloc[1].count("\n") == 3


def test_a_read_only_store_reads_and_can_not_write(db_path: Path) -> None:
    """The dashboard's store (docs/dashboard.md#read-only): it reads what a writer saved, and
    SQLite itself refuses any write through it, so no code path of the dashboard can write."""
    with pytest.raises(StoreError, match="no database"):
        Store(db_path, read_only=True)
    assert not db_path.exists()
    with Store(db_path) as writer:
        writer.save_rollout(make_record("r1"))
        with Store(db_path, read_only=True) as reader:
            assert reader.runs.read()["run_id"].tolist() == ["r1"]
            with pytest.raises(StoreError, match="readonly"):
                reader.save_rollout(make_record("r2"))
    with raw(db_path) as conn:
        assert conn.execute("SELECT count(*) FROM runs").fetchone()[0] == 1


def _old_file(path: Path, runs: int) -> None:
    """A file as rtax made it before auto_vacuum: `runs` runs of 20 actions each."""
    db = sqlite_utils.Database(path)
    for version, migration in migrations.MIGRATIONS:
        if version <= 6:
            migration(db)
    db.execute("PRAGMA user_version = 6")
    db.conn.commit()
    db.conn.close()
    with Store(path) as s:  # the file keeps auto_vacuum off
        for i in range(runs):
            s.save_rollout(make_record(f"r{i:04d}", phases=("action",) * 20))


def _auto_vacuum(path: Path) -> int:
    with sqlite3.connect(path) as conn:
        return conn.execute("PRAGMA auto_vacuum").fetchone()[0]


def test_old_file_gets_incremental_vacuum_at_its_first_compaction(tmp_path: Path) -> None:
    """A small file made without auto_vacuum is converted by one VACUUM, then gives pages back
    in bounded steps; new files have incremental auto_vacuum from the start."""
    path = tmp_path / "old.db"
    _old_file(path, 300)
    assert _auto_vacuum(path) == 0
    with Store(path) as s:
        s.fold_runs([], [f"r{i:04d}" for i in range(150)])
        assert s.compact(pause_s=0) is True
    assert _auto_vacuum(path) == 2
    with Store(path) as s:
        size = path.stat().st_size
        s.fold_runs([], [f"r{i:04d}" for i in range(150, 300)])
        assert s.db.execute("PRAGMA freelist_count").fetchone()[0] > 30
        assert s.compact(pause_s=0, step_pages=10) is True  # in several incremental steps
        assert s.db.execute("PRAGMA freelist_count").fetchone()[0] == 0
    assert path.stat().st_size < size
    Store(tmp_path / "new.db").close()
    assert _auto_vacuum(tmp_path / "new.db") == 2


def test_a_large_old_file_is_never_rewritten_whole_under_writers(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    _old_file(path, 50)
    with Store(path) as s:
        s.fold_runs([], [f"r{i:04d}" for i in range(25)])
        assert s.compact(pause_s=0, full_vacuum_up_to=1024) is False  # freed pages reused
        assert s.runs.count() == 25
    assert _auto_vacuum(path) == 0


def test_v8_file_gains_vantage_and_keeps_its_series_apart_from_new_vantages(db_path: Path) -> None:
    """A file from before vantages (v8): its runs, its rollups (folded history) and its
    summaries all become `local`, none lost; a run seen from another vantage afterwards is a
    series of its own in the summaries and in retention's rollups (docs/ray.md#vantages)."""
    db = sqlite_utils.Database(db_path)
    for version, migration in migrations.MIGRATIONS:
        if version <= 8:
            migration(db)
    db.execute("PRAGMA user_version = 8")
    _insert_as_of(db, make_run("old-run", started_at="2024-06-01T12:00:00+00:00", wall_s=2.0))
    rollup = {c: None for c in frozen.V4_ROLLUP_COLUMNS}
    rollup |= {"substrate": "local", "kind": "local", "mode": "exec", "fidelity": "real"}
    rollup |= {"tier": "T0", "steps": 0, "bucket": "hour", "metric": "wall_s", "runs": 4}
    rollup |= {"bucket_start": "2024-05-01T00:00:00.000000+00:00", "n": 4, "sum": 8.0}
    rollup |= {"sketch": '{"v": [1.0, 2.0, 2.0, 3.0]}', "errors": "{}"}
    db["rollups"].insert(rollup)
    store_summaries.build(db)
    db.conn.commit()
    db.conn.close()

    with Store(db_path) as s:
        assert s.version == SCHEMA_VERSION
        assert s.runs.read()["vantage"].tolist() == ["local"]
        (kept,) = s.rollups.read().to_dict("records")
        assert (kept["vantage"], kept["runs"], kept["sum"]) == ("local", 4, 8.0)
        s.save_rollout(make_record("far", started_at="2024-06-01T12:10:00+00:00", vantage="eu"))
        walls = s.summaries.read(metrics=["wall_s"])
        walls = walls[walls["bucket"] == "month"].groupby("vantage")["runs"].sum().to_dict()
        assert walls == {"eu": 1, "local": 1 + 4}  # the raw run and the folded four
        assert s.summaries.distinct()["vantage"] == ["eu", "local"]
        assert s.runs.read(vantage="eu")["run_id"].tolist() == ["far"]
