"""Frozen column lists: what each migration created or copied, as it did it then.

Why apart from the migrations (`rtax.store.migrations`) and from today's lists
(`rtax.store.schema`): a migration describes the past. Version 1 created exactly these
columns, whatever the record declares today; deriving them from today's lists would silently
change what an old migration does (a new database and an upgraded one would then differ). So
these literals never change; a new column is a new migration.
"""

from __future__ import annotations

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
#: Frozen: the vantage `_v11` gives every run, rollup and summary made before it.
V11_VANTAGE = "local"


def v12_series_parts(key: str) -> tuple[str, str]:
    """Frozen: (launch type, vantage) read back from an incident's series key as version 12
    found it (``docker T0 S=0 exec real``, then `` <launch type>`` unless cold, then
    `` @ <vantage>`` unless local: `rtax.core.series.Series.key` as it was then)."""
    base, _, vantage = key.partition(" @ ")
    tokens = base.split(" ")
    return (tokens[5] if len(tokens) == 6 else "cold"), (vantage or "local")
