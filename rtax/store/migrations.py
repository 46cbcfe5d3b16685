"""The store's schema history: one migration per version, applied in order by `rtax.store.database`.

Why the column lists here are literals (their own module, `rtax.store.frozen`, and the
``CREATE TABLE`` statements below) and not read from `rtax.core.record` or `rtax.store.schema`:
a migration describes the past. Version 1 created exactly these columns, whatever the record
declares today; deriving them would silently change what an old migration does (a new database
and an upgraded one would then differ). A new field is declared in `rtax.core.record.RUN_FIELDS`
(or `ACTION_FIELDS`, or a list of `rtax.store.schema`) *and* added here by a new migration;
tests/test_record.py checks that the two agree.

The schema version is SQLite's ``user_version``; each migration runs in its own transaction.
Summaries are (re)built by `rtax.store.summaries.build`, which reads the table as it is at the
version being applied.
"""

from __future__ import annotations

from collections.abc import Callable

import sqlite_utils

from rtax.store.frozen import (
    V1_ACTION_COLUMNS,
    V1_RUN_COLUMNS,
    V4_ROLLUP_COLUMNS,
    V5_RESOLUTION_COLUMNS,
    V10_ROLLUP_COLUMNS,
    V11_VANTAGE,
    v12_series_parts,
)
from rtax.store.summaries import build as build_summaries
from rtax.store.summaries import build_months


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
    """Per-series hourly summaries (rtax.analysis.summaries, docs/data.md#summaries), built here
    from the raw runs and the rollups the file already holds, so an upgraded file pages as fast
    as a new one."""
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


def _v12(db: sqlite_utils.Database) -> None:
    """The incident lifecycle (docs/alerts.md#lifecycle) and maintenance windows: an incident
    keeps all seven parts of its series (launch type and vantage were in its key only, read back
    from it here), when and with what note it was acknowledged, why it was resolved
    (``recovered``, ``baseline``: accepted as the new level, ``manual``, ``rule_removed``),
    when and with what note, the maintenance window it opened in, and from how many vantages it
    is seen. Windows added with ``rtax maintenance add`` are a table of their own; the
    configuration's ``[[maintenance]]`` stay in the file."""
    db.execute("ALTER TABLE [incidents] ADD COLUMN [launch_type] TEXT NOT NULL DEFAULT 'cold'")
    db.execute("ALTER TABLE [incidents] ADD COLUMN [vantage] TEXT NOT NULL DEFAULT 'local'")
    for column in (
        "acknowledged_at",
        "acknowledged_note",
        "resolution",
        "resolved_at",
        "note",
        "maintenance",
        "vantages",
    ):
        db.execute(f"ALTER TABLE [incidents] ADD COLUMN [{column}] TEXT")
    for incident_id, key in db.execute("SELECT id, series FROM incidents").fetchall():
        launch_type, vantage = v12_series_parts(key)  # as Series.key wrote them
        db.execute(
            "UPDATE [incidents] SET launch_type = ?, vantage = ? WHERE id = ?",
            [launch_type, vantage, incident_id],
        )
    db.execute(
        "UPDATE [incidents] SET resolution = CASE WHEN detail = 'its rule was removed' "
        "THEN 'rule_removed' ELSE 'recovered' END WHERE state = 'resolved'"
    )
    db.execute(
        "CREATE TABLE [maintenance] ([id] INTEGER PRIMARY KEY, [series] TEXT NOT NULL, "
        "[start] TEXT NOT NULL, [end] TEXT NOT NULL, [reason] TEXT NOT NULL, "
        "[created_at] TEXT NOT NULL, CHECK ([start] < [end]))"
    )
    db.execute("CREATE INDEX [idx_maintenance_end] ON [maintenance] ([end])")


def _v13(db: sqlite_utils.Database) -> None:
    """Launch paths (docs/measurement.md#launch-paths): the restore and resume phases on runs
    (older runs had neither), the launch type of a load run (a fork restores its group from
    one snapshot; every older load run was cold), and the snapshots made per substrate, tier
    and toolchain, with how long each took and what it holds on disk."""
    for phase in ("restore", "resume"):
        db.execute(f"ALTER TABLE [runs] ADD COLUMN [{phase}_s] REAL")
        db.execute(f"ALTER TABLE [runs] ADD COLUMN [{phase}_res_s] REAL")
    db.execute("ALTER TABLE [load_runs] ADD COLUMN [launch_type] TEXT NOT NULL DEFAULT 'cold'")
    db.execute(
        "CREATE TABLE [snapshots] ([snapshot_id] TEXT PRIMARY KEY, [substrate] TEXT NOT NULL, "
        "[kind] TEXT, [mode] TEXT, [fidelity] TEXT NOT NULL, [tier] TEXT NOT NULL, "
        "[toolchain] TEXT, [image] TEXT, [made_at] TEXT NOT NULL, [snapshot_s] REAL, "
        "[setup_s] REAL, [warmup_s] REAL, [size_bytes] INTEGER, [location] TEXT, "
        "[state] TEXT NOT NULL CHECK ([state] IN ('ready', 'replaced', 'removed')), "
        "[host] TEXT, [rtax_version] TEXT, [detail] TEXT)"
    )
    db.execute("CREATE INDEX [idx_snapshots_key] ON [snapshots] ([substrate], [tier], [made_at])")


def _v14(db: sqlite_utils.Database) -> None:
    """Month rows in the summaries (docs/data.md#summaries): a window of a year merges a dozen
    rows per series and metric instead of 365 day rows. Made from the day rows, not the runs,
    so a million-run file upgrades in seconds (`build_months`). And an index for the runs a
    pool handed over (the Paths page's idle memory read every run's launch type: 0.3 s a
    render at a million runs)."""
    build_months(db)
    db["runs"].create_index(["launch_type", "started_at"], if_not_exists=True)


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
    (12, _v12),
    (13, _v13),
    (14, _v14),
)
SCHEMA_VERSION = MIGRATIONS[-1][0]
