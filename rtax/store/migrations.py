"""The store's schema history: one migration per version, applied in order by `rtax.store.database`.

Why the column lists here are literals and not read from `rtax.core.record`: a migration describes
the past. Version 1 created exactly these columns, whatever the record declares today; deriving
them would silently change what an old migration does (a new database and an upgraded one
would then differ). A new field is declared in `rtax.core.record.RUN_FIELDS` (or `ACTION_FIELDS`)
*and* added here by a new migration; tests/test_record.py checks that the two agree.

The schema version is SQLite's ``user_version``; each migration runs in its own transaction.
"""

from __future__ import annotations

from collections.abc import Callable

import sqlite_utils

#: Frozen: the runs columns version 1 created (rtax.core.record.RUN_FIELDS with since=1).
V1_RUN_COLUMNS: dict[str, type] = {
    "run_id": str,
    "started_at": str,
    "ended_at": str,
    "substrate": str,
    "kind": str,
    "tier": str,
    "steps": int,
    "seed": int,
    "fidelity": str,
    "status": str,
    "error_class": str,
    "error_message": str,
    "create_s": float,
    "orchestration_s": float,
    "ready_s": float,
    "setup_s": float,
    "actions_s": float,
    "cleanup_s": float,
    "overhead_s": float,
    "wall_s": float,
    "time_to_first_command_s": float,
    "episode_s": float,
    "n_actions": int,
    "n_actions_done": int,
    "cleanup_ok": int,
    "milestones": str,
    "host": str,
    "rtax_version": str,
    "endpoint": str,
    "provenance": str,
}
#: Frozen: the actions columns version 1 created.
V1_ACTION_COLUMNS: dict[str, type] = {
    "run_id": str,
    "seq": int,
    "phase": str,
    "idx": int,
    "category": str,
    "command": str,
    "exit_code": int,
    "latency_s": float,
    "exec_s": float,
    "t_offset_s": float,
    "stdout_bytes": int,
    "stderr_bytes": int,
    "ok": int,
    "error_class": str,
    "detail": str,
}
#: Frozen: the per-phase resolution columns version 5 added to runs.
V5_RESOLUTION_COLUMNS: tuple[str, ...] = (
    "create_res_s",
    "orchestration_res_s",
    "ready_res_s",
    "setup_res_s",
    "actions_res_s",
    "cleanup_res_s",
)
#: Frozen: the columns of rollups as `_v4` created them, in order.
V4_ROLLUP_COLUMNS: tuple[str, ...] = (
    "substrate",
    "kind",
    "mode",
    "fidelity",
    "tier",
    "steps",
    "bucket",
    "bucket_start",
    "metric",
    "runs",
    "n",
    "sum",
    "min",
    "max",
    "sketch",
    "errors",
)
#: Frozen: the columns of rollups as `_v10` rebuilt them (the launch type added), in order.
V10_ROLLUP_COLUMNS: tuple[str, ...] = (*V4_ROLLUP_COLUMNS, "launch_type")
#: The columns of rollups today (`_v11` added vantage), in order.
ROLLUP_COLUMNS: tuple[str, ...] = (
    *V4_ROLLUP_COLUMNS[:4],
    "vantage",
    *V4_ROLLUP_COLUMNS[4:],
    "launch_type",
)
#: Frozen: the vantage `_v11` gives every run, rollup and summary made before it.
V11_VANTAGE = "local"


def _v1(db: sqlite_utils.Database) -> None:
    """The first schema: runs and their actions."""
    db["runs"].create(V1_RUN_COLUMNS, pk="run_id", not_null={"run_id", "substrate", "tier"})
    db["actions"].create(
        V1_ACTION_COLUMNS, pk=("run_id", "seq"), foreign_keys=[("run_id", "runs", "run_id")]
    )


def _v2(db: sqlite_utils.Database) -> None:
    """Action mode (exec / session) on runs, and the indexes the dashboard's queries use."""
    db["runs"].add_column("mode", str, not_null_default="exec")
    db["runs"].create_index(["substrate", "tier", "steps", "started_at"], if_not_exists=True)
    db["runs"].create_index(["started_at"], if_not_exists=True)
    db["runs"].create_index(["fidelity", "status"], if_not_exists=True)


def _v3(db: sqlite_utils.Database) -> None:
    """Which scheduler plan made a run and when it was due (scheduler lag = started_at minus
    scheduled_at)."""
    db.execute("ALTER TABLE [runs] ADD COLUMN [plan] TEXT")
    db.execute("ALTER TABLE [runs] ADD COLUMN [scheduled_at] TEXT")


def _v4(db: sqlite_utils.Database) -> None:
    """Rollups: what retention keeps of raw samples it deletes (counts, sums, extremes and a
    quantile sketch per group, time bucket and metric; docs/configuration.md#retention)."""
    db.execute(
        "CREATE TABLE [rollups] ([substrate] TEXT NOT NULL, [kind] TEXT, [mode] TEXT NOT NULL, "
        "[fidelity] TEXT NOT NULL, [tier] TEXT NOT NULL, [steps] INTEGER NOT NULL, "
        "[bucket] TEXT NOT NULL, [bucket_start] TEXT NOT NULL, [metric] TEXT NOT NULL, "
        "[runs] INTEGER NOT NULL, [n] INTEGER NOT NULL, [sum] REAL, [min] REAL, [max] REAL, "
        "[sketch] TEXT, [errors] TEXT, PRIMARY KEY ([substrate], [mode], [fidelity], [tier], "
        "[steps], [bucket], [bucket_start], [metric]))"
    )
    db.execute("CREATE INDEX [idx_rollups_bucket_start] ON [rollups] ([bucket_start])")


def _v5(db: sqlite_utils.Database) -> None:
    """Resolution (docs/measurement.md#resolution): per phase on runs, per command on actions. Older
    rows keep NULL: their polling (an exponential back-off) was not recorded."""
    for column in V5_RESOLUTION_COLUMNS:
        db.execute(f"ALTER TABLE [runs] ADD COLUMN [{column}] REAL")
    db.execute("ALTER TABLE [actions] ADD COLUMN [resolution_s] REAL")


def _v6(db: sqlite_utils.Database) -> None:
    """The workload toolchain's digest on every run (docs/toolchain.md), so that
    a series whose toolchain differs from the local floor's can be told apart; older rows have
    none (unknown)."""
    db.execute("ALTER TABLE [runs] ADD COLUMN [toolchain] TEXT")


#: The columns of incidents (created by `_v7`), in order, without its integer key `id`.
INCIDENT_COLUMNS: tuple[str, ...] = (
    "series",
    "substrate",
    "tier",
    "steps",
    "mode",
    "fidelity",
    "metric",
    "rule",
    "detector",
    "state",
    "start",
    "end",
    "opened_at",
    "before_p50",
    "after_p50",
    "magnitude",
    "detail",
    "alert_open",
    "alert_resolved",
    "alert_attempts",
    "alert_next_at",
    "alert_error",
    "alert_open_sent_at",
    "alert_resolved_sent_at",
)


def _v7(db: sqlite_utils.Database) -> None:
    """Incidents (docs/alerts.md#incidents): a detected change or a rule breach of one series
    and metric, open until the series returns, with the delivery state of its two alerts
    (opened, resolved) kept here so that a restart still delivers a pending one."""
    db.execute(
        "CREATE TABLE [incidents] ([id] INTEGER PRIMARY KEY, [series] TEXT NOT NULL, "
        "[substrate] TEXT NOT NULL, [tier] TEXT NOT NULL, [steps] INTEGER NOT NULL, "
        "[mode] TEXT NOT NULL, [fidelity] TEXT NOT NULL, [metric] TEXT NOT NULL, "
        "[rule] TEXT NOT NULL, [detector] TEXT NOT NULL, "
        "[state] TEXT NOT NULL CHECK ([state] IN ('open', 'resolved')), "
        "[start] TEXT NOT NULL, [end] TEXT, [opened_at] TEXT NOT NULL, [before_p50] REAL, "
        "[after_p50] REAL, [magnitude] REAL, [detail] TEXT, [alert_open] TEXT NOT NULL, "
        "[alert_resolved] TEXT, [alert_attempts] INTEGER NOT NULL DEFAULT 0, "
        "[alert_next_at] TEXT, [alert_error] TEXT, [alert_open_sent_at] TEXT, "
        "[alert_resolved_sent_at] TEXT)"
    )
    db.execute("CREATE INDEX [idx_incidents_state] ON [incidents] ([state], [series])")
    db.execute("CREATE INDEX [idx_incidents_key] ON [incidents] ([series], [metric], [rule])")


def _v8(db: sqlite_utils.Database) -> None:
    """Per-series hourly summaries (rtax.analysis.summaries, docs/data.md#summaries), built here from the
    raw runs and the rollups the file already holds, so an upgraded file pages as fast as a new
    one."""
    db.execute(
        "CREATE TABLE [summaries] ([substrate] TEXT NOT NULL, [kind] TEXT, [mode] TEXT NOT NULL, "
        "[fidelity] TEXT NOT NULL, [tier] TEXT NOT NULL, [steps] INTEGER NOT NULL, "
        "[toolchain] TEXT NOT NULL, [bucket] TEXT NOT NULL, [bucket_start] TEXT NOT NULL, "
        "[metric] TEXT NOT NULL, "
        "[runs] INTEGER NOT NULL, [n] INTEGER NOT NULL, [sum] REAL, [sumsq] REAL, [min] REAL, "
        "[max] REAL, [res_max] REAL, [last_started_at] TEXT, [sketch] TEXT, [errors] TEXT, "
        "PRIMARY KEY ([substrate], [mode], [fidelity], [tier], [steps], [toolchain], "
        "[bucket], [bucket_start], [metric]))"
    )
    db.execute(
        "CREATE INDEX [idx_summaries_bucket] ON [summaries] ([metric], [bucket], [bucket_start])"
    )
    # The floor's toolchain (the newest successful real local run) without a scan of runs.
    db["runs"].create_index(["kind", "fidelity", "status", "started_at"], if_not_exists=True)
    build_summaries(db)


def build_summaries(db: sqlite_utils.Database, chunk_runs: int = 20_000) -> int:
    """(Re)write every summary row from the raw runs (with their action-row counts) and the
    rollups of folded history; return the number of rows. Used by `_v8` and by
    `Store.rebuild_summaries` (repair). Folded history keeps what its rollups kept: no
    toolchain (unknown), milestones, sums of squares, resolution or action-row counts."""
    from rtax.analysis import summaries

    conn = db.conn
    # The table as it is at this version (`_v8` builds before `_v11` added vantage, whose rows
    # are then all `local`, as their runs are).
    present = {c.name for c in db["summaries"].columns}
    conn.execute("DELETE FROM summaries")
    action_rows = dict(conn.execute("SELECT run_id, count(*) FROM actions GROUP BY run_id"))
    merged: dict[tuple, dict] = {}

    def add(rows: list[dict]) -> None:
        for row in rows:
            key = tuple(row[k] for k in (*summaries.KEY, "metric") if k != "kind" and k in present)
            old = merged.get(key)
            merged[key] = summaries.merge_row(old, row) if old else row

    # A run with no start time (only hand-made rows lack one) falls in no bucket, as it falls
    # in no time window of the raw rows either.
    cursor = conn.execute("SELECT * FROM runs WHERE started_at IS NOT NULL ORDER BY started_at")
    names = [d[0] for d in cursor.description]
    while chunk := cursor.fetchmany(chunk_runs):
        add(summaries.rows_of((dict(zip(names, r, strict=True)) for r in chunk), action_rows))
    marks = ", ".join("?" for _ in summaries.RUN_METRICS)
    cursor = conn.execute(
        f"SELECT * FROM rollups WHERE metric IN ({marks})", list(summaries.RUN_METRICS)
    )
    names = [d[0] for d in cursor.description]
    rolled = []
    for values in cursor.fetchall():
        r = dict(zip(names, values, strict=True))
        for bucket in summaries.BUCKETS:  # a day's rollup lands at its day's start in both
            start = r["bucket_start"] if bucket == r["bucket"] else None
            rolled.append(
                {
                    **{k: r[k] for k in ("substrate", "kind", "mode", "fidelity", "tier")},
                    "launch_type": r.get("launch_type") or "cold",  # before v10: all cold
                    "vantage": r.get("vantage") or V11_VANTAGE,
                    "steps": r["steps"],
                    "toolchain": "",
                    "bucket": bucket,
                    "bucket_start": start or summaries.start_of(r["bucket_start"], "day"),
                    "metric": r["metric"],
                    **{k: r[k] for k in ("runs", "n", "sum", "min", "max", "sketch", "errors")},
                    "sumsq": None,
                    "res_max": None,
                    "last_started_at": r["bucket_start"],
                }
            )
    add(rolled)
    columns = [c for c in summaries.COLUMNS if c in present]
    conn.executemany(
        f"INSERT INTO summaries ({', '.join(columns)}) VALUES ({', '.join('?' for _ in columns)})",
        ([row.get(c) for c in columns] for row in merged.values()),
    )
    return len(merged)


#: The columns of load_runs (created by `_v9`), in order (docs/load.md#the-record).
LOAD_RUN_COLUMNS: tuple[str, ...] = (
    "load_id",
    "name",
    "substrate",
    "kind",
    "mode",
    "fidelity",
    "tier",
    "steps",
    "shape",
    "n",
    "every_s",
    "status",
    "started_at",
    "ended_at",
    "rollouts",
    "ok",
    "ready",
    "concurrency",
    "duration_s",
    "creates_per_s",
    "time_to_first_ready_s",
    "time_to_all_ready_s",
    "failures",
    "rate_limit_waits",
    "rate_limit_wait_s",
    "harness_cpu_s",
    "harness_cpu_cores",
    "host_cpus",
    "dispatch_lag_p50_s",
    "dispatch_lag_max_s",
    "host",
    "rtax_version",
)


def _v9(db: sqlite_utils.Database) -> None:
    """Load runs (docs/load.md): one row per sequential, staggered or burst run of a tier on
    one substrate, with its measured figures; each of its rollouts names it on its run row
    (``load_id``) with its launch order (``load_index``). A load run is written when it starts
    (``status`` running) and completed or marked interrupted when it ends, so one whose
    process died says so."""
    db.execute(
        "CREATE TABLE [load_runs] ([load_id] TEXT PRIMARY KEY, [name] TEXT, "
        "[substrate] TEXT NOT NULL, [kind] TEXT, [mode] TEXT NOT NULL, [fidelity] TEXT NOT NULL, "
        "[tier] TEXT NOT NULL, [steps] INTEGER NOT NULL, "
        "[shape] TEXT NOT NULL CHECK ([shape] IN ('sequential', 'staggered', 'burst')), "
        "[n] INTEGER NOT NULL, [every_s] REAL, "
        "[status] TEXT NOT NULL CHECK ([status] IN ('running', 'complete', 'interrupted')), "
        "[started_at] TEXT NOT NULL, [ended_at] TEXT, [rollouts] INTEGER, [ok] INTEGER, "
        "[ready] INTEGER, [concurrency] INTEGER, [duration_s] REAL, [creates_per_s] REAL, "
        "[time_to_first_ready_s] REAL, [time_to_all_ready_s] REAL, [failures] TEXT, "
        "[rate_limit_waits] INTEGER, [rate_limit_wait_s] REAL, [harness_cpu_s] REAL, "
        "[harness_cpu_cores] REAL, [host_cpus] INTEGER, [dispatch_lag_p50_s] REAL, "
        "[dispatch_lag_max_s] REAL, [host] TEXT, [rtax_version] TEXT)"
    )
    db.execute("CREATE INDEX [idx_load_runs_started] ON [load_runs] ([started_at])")
    db.execute("ALTER TABLE [runs] ADD COLUMN [load_id] TEXT")
    db.execute("ALTER TABLE [runs] ADD COLUMN [load_index] INTEGER")
    db.execute("CREATE INDEX [idx_runs_load] ON [runs] ([load_id], [load_index])")


def _v10(db: sqlite_utils.Database) -> None:
    """Warm pools (docs/measurement.md#warm-pools): the claim phase and its resolution, and the
    launch type on runs (every older run was cold); the launch type in the keys of rollups and
    summaries, so warm and cold samples are never folded or summarized together. SQLite can't
    change a primary key: both tables are rebuilt, rollups copied (all cold), summaries
    rebuilt from the runs and rollups (`build_summaries`)."""
    db.execute("ALTER TABLE [runs] ADD COLUMN [claim_s] REAL")
    db.execute("ALTER TABLE [runs] ADD COLUMN [claim_res_s] REAL")
    db.execute("ALTER TABLE [runs] ADD COLUMN [launch_type] TEXT NOT NULL DEFAULT 'cold'")
    db.execute("ALTER TABLE [rollups] RENAME TO [rollups_v9]")
    db.execute("DROP INDEX IF EXISTS [idx_rollups_bucket_start]")
    db.execute(
        "CREATE TABLE [rollups] ([substrate] TEXT NOT NULL, [kind] TEXT, [mode] TEXT NOT NULL, "
        "[fidelity] TEXT NOT NULL, [tier] TEXT NOT NULL, [steps] INTEGER NOT NULL, "
        "[bucket] TEXT NOT NULL, [bucket_start] TEXT NOT NULL, [metric] TEXT NOT NULL, "
        "[runs] INTEGER NOT NULL, [n] INTEGER NOT NULL, [sum] REAL, [min] REAL, [max] REAL, "
        "[sketch] TEXT, [errors] TEXT, [launch_type] TEXT NOT NULL DEFAULT 'cold', "
        "PRIMARY KEY ([substrate], [mode], [fidelity], [launch_type], [tier], [steps], "
        "[bucket], [bucket_start], [metric]))"
    )
    old = ", ".join(f"[{c}]" for c in V4_ROLLUP_COLUMNS)
    db.execute(f"INSERT INTO [rollups] ({old}) SELECT {old} FROM [rollups_v9]")
    db.execute("DROP TABLE [rollups_v9]")
    db.execute("CREATE INDEX [idx_rollups_bucket_start] ON [rollups] ([bucket_start])")
    db.execute("DROP TABLE [summaries]")
    db.execute(
        "CREATE TABLE [summaries] ([substrate] TEXT NOT NULL, [kind] TEXT, [mode] TEXT NOT NULL, "
        "[fidelity] TEXT NOT NULL, [launch_type] TEXT NOT NULL, [tier] TEXT NOT NULL, "
        "[steps] INTEGER NOT NULL, [toolchain] TEXT NOT NULL, [bucket] TEXT NOT NULL, "
        "[bucket_start] TEXT NOT NULL, [metric] TEXT NOT NULL, "
        "[runs] INTEGER NOT NULL, [n] INTEGER NOT NULL, [sum] REAL, [sumsq] REAL, [min] REAL, "
        "[max] REAL, [res_max] REAL, [last_started_at] TEXT, [sketch] TEXT, [errors] TEXT, "
        "PRIMARY KEY ([substrate], [mode], [fidelity], [launch_type], [tier], [steps], "
        "[toolchain], [bucket], [bucket_start], [metric]))"
    )
    db.execute(
        "CREATE INDEX [idx_summaries_bucket] ON [summaries] ([metric], [bucket], [bucket_start])"
    )
    build_summaries(db)


def _v11(db: sqlite_utils.Database) -> None:
    """Vantage (docs/ray.md#vantages): where each run was probed from, ``local`` for every run
    made before (they all ran on the host that stored them). The same substrate seen from two
    vantages is two series, so vantage joins the keys of rollups and summaries: both tables are
    rebuilt with it (SQLite can't change a primary key in place), their old rows as ``local``,
    summaries from the runs and rollups (`build_summaries`)."""
    db.execute(f"ALTER TABLE [runs] ADD COLUMN [vantage] TEXT NOT NULL DEFAULT '{V11_VANTAGE}'")
    db.execute("ALTER TABLE [rollups] RENAME TO [rollups_v10]")
    db.execute("DROP INDEX IF EXISTS [idx_rollups_bucket_start]")
    db.execute(
        "CREATE TABLE [rollups] ([substrate] TEXT NOT NULL, [kind] TEXT, [mode] TEXT NOT NULL, "
        "[fidelity] TEXT NOT NULL, [vantage] TEXT NOT NULL, [tier] TEXT NOT NULL, "
        "[steps] INTEGER NOT NULL, [bucket] TEXT NOT NULL, [bucket_start] TEXT NOT NULL, "
        "[metric] TEXT NOT NULL, [runs] INTEGER NOT NULL, [n] INTEGER NOT NULL, [sum] REAL, "
        "[min] REAL, [max] REAL, [sketch] TEXT, [errors] TEXT, "
        "[launch_type] TEXT NOT NULL DEFAULT 'cold', PRIMARY KEY ([substrate], [mode], "
        "[fidelity], [vantage], [launch_type], [tier], [steps], [bucket], [bucket_start], "
        "[metric]))"
    )
    old = ", ".join(f"[{c}]" for c in V10_ROLLUP_COLUMNS)
    db.execute(
        f"INSERT INTO [rollups] ({old}, [vantage]) SELECT {old}, '{V11_VANTAGE}' FROM [rollups_v10]"
    )
    db.execute("DROP TABLE [rollups_v10]")
    db.execute("CREATE INDEX [idx_rollups_bucket_start] ON [rollups] ([bucket_start])")
    db.execute("DROP TABLE [summaries]")
    db.execute(
        "CREATE TABLE [summaries] ([substrate] TEXT NOT NULL, [kind] TEXT, [mode] TEXT NOT NULL, "
        "[fidelity] TEXT NOT NULL, [vantage] TEXT NOT NULL, [launch_type] TEXT NOT NULL, "
        "[tier] TEXT NOT NULL, [steps] INTEGER NOT NULL, [toolchain] TEXT NOT NULL, "
        "[bucket] TEXT NOT NULL, [bucket_start] TEXT NOT NULL, [metric] TEXT NOT NULL, "
        "[runs] INTEGER NOT NULL, [n] INTEGER NOT NULL, [sum] REAL, [sumsq] REAL, [min] REAL, "
        "[max] REAL, [res_max] REAL, [last_started_at] TEXT, [sketch] TEXT, [errors] TEXT, "
        "PRIMARY KEY ([substrate], [mode], [fidelity], [vantage], [launch_type], [tier], "
        "[steps], [toolchain], [bucket], [bucket_start], [metric]))"
    )
    db.execute(
        "CREATE INDEX [idx_summaries_bucket] ON [summaries] ([metric], [bucket], [bucket_start])"
    )
    build_summaries(db)


#: (version, migration), applied in order to files whose user_version is lower.
MIGRATIONS: tuple[tuple[int, Callable[[sqlite_utils.Database], None]], ...] = (
    (1, _v1),
    (2, _v2),
    (3, _v3),
    (4, _v4),
    (5, _v5),
    (6, _v6),
    (7, _v7),
    (8, _v8),
    (9, _v9),
    (10, _v10),
    (11, _v11),
)
SCHEMA_VERSION = MIGRATIONS[-1][0]
