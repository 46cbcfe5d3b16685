"""The store's tables as they are today: one column list per table, the one every reader uses.

Why one module (docs/data.md): the dashboard, the alerts and the exports name a table's columns
for empty frames, selections and payloads; a second list of the same columns drifts (a column
added to the table but not to the copy). So each table's list is declared once: the runs and
actions by the record schema (`rtax.core.record`, where a field is declared with its type and
the version that added it), the summaries by `rtax.analysis.summaries` (which computes their
rows), the others here. All are re-exported by `rtax.store`.

These lists describe the present. The migrations (`rtax.store.migrations`) describe the past
and keep their own frozen literals (`rtax.store.frozen`); a new column is added here *and* by a
new migration, and tests (tests/test_record.py, tests/test_incidents.py, tests/test_store.py)
check that a migrated file has exactly these columns.
"""

from __future__ import annotations

from rtax.analysis import summaries as _summaries
from rtax.core.record import ACTION_COLUMNS, PAGE_COLUMNS, RUN_COLUMNS

__all__ = [
    "ACTION_COLUMNS",
    "INCIDENT_COLUMNS",
    "LOAD_ROLLOUT_COLUMNS",
    "LOAD_RUN_COLUMNS",
    "MAINTENANCE_COLUMNS",
    "OPTION_COLUMNS",
    "PAGE_COLUMNS",
    "ROLLUP_COLUMNS",
    "RUN_COLUMNS",
    "SNAPSHOT_COLUMNS",
    "SUMMARY_COLUMNS",
    "SUMMARY_KEY",
]

#: The columns of summaries, in order (`rtax.analysis.summaries.COLUMNS`).
SUMMARY_COLUMNS: tuple[str, ...] = _summaries.COLUMNS
#: The summaries table's primary key: a row's key (`rtax.analysis.summaries.KEY`) and metric,
#: without the kind, which the substrate's name decides.
SUMMARY_KEY: tuple[str, ...] = (*(k for k in _summaries.KEY if k != "kind"), "metric")

#: The columns of incidents, in order, without its integer key ``id`` (docs/alerts.md#incidents).
#: What an incident says comes first, its alerts' delivery state (the outbox) after it.
INCIDENT_COLUMNS: tuple[str, ...] = (
    "series",
    "substrate",
    "tier",
    "steps",
    "mode",
    "fidelity",
    "launch_type",
    "vantage",
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
    "acknowledged_at",
    "acknowledged_note",
    "resolution",
    "resolved_at",
    "note",
    "maintenance",
    "vantages",
    "alert_open",
    "alert_resolved",
    "alert_attempts",
    "alert_next_at",
    "alert_error",
    "alert_open_sent_at",
    "alert_resolved_sent_at",
)

#: The columns of maintenance (windows added with ``rtax maintenance add``), in order, without
#: its integer key ``id``; ``series`` is its selector as JSON (`rtax.core.series.Selector`).
MAINTENANCE_COLUMNS: tuple[str, ...] = ("series", "start", "end", "reason", "created_at")

#: The columns of load_runs, in order (docs/load.md#the-record).
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
    "launch_type",
)

#: The columns of snapshots (docs/measurement.md#launch-paths), in order: one per snapshot made,
#: kept after it is replaced so its time and size stay measurements.
SNAPSHOT_COLUMNS: tuple[str, ...] = (
    "snapshot_id",
    "substrate",
    "kind",
    "mode",
    "fidelity",
    "tier",
    "toolchain",
    "image",
    "made_at",
    "snapshot_s",
    "setup_s",
    "warmup_s",
    "size_bytes",
    "location",
    "state",
    "host",
    "rtax_version",
    "detail",
)

#: The columns of rollups (retention's folded history, `rtax.store.retention`), in order.
ROLLUP_COLUMNS: tuple[str, ...] = (
    "substrate",
    "kind",
    "mode",
    "fidelity",
    "vantage",
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
    "launch_type",
)

#: A selection of runs, not a table: what the load runs' rollouts are read with by default
#: (`rtax.store.loads.LoadRuns.rollouts`), what the Capacity page and the envelope fit need,
#: without the bulky provenance.
LOAD_ROLLOUT_COLUMNS: tuple[str, ...] = (
    "run_id",
    "load_id",
    "load_index",
    "started_at",
    "scheduled_at",
    "substrate",
    "mode",
    "fidelity",
    "tier",
    "steps",
    "status",
    "error_class",
    "create_s",
    "orchestration_s",
    "ready_s",
    "time_to_first_command_s",
    "wall_s",
)

#: The grouping columns whose values the dashboard's filters offer (`Runs.distinct`,
#: `Summaries.distinct`).
OPTION_COLUMNS: tuple[str, ...] = ("substrate", "tier", "steps", "fidelity", "mode", "vantage")
