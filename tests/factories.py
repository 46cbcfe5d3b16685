"""Hand-made rollout records for tests that need exact, known samples (store, dashboard).

Every row has every field rtax.core.record declares (None unless set here); an override that is not
a field is refused, so a test can't silently write a column that doesn't exist."""

from __future__ import annotations

import json
from typing import Any

from rtax.core.record import ACTION_COLUMNS, RUN_COLUMNS, RolloutRecord, phases_of


def make_run(run_id: str, **overrides: Any) -> dict[str, Any]:
    """A successful cold run row with known values (the keys of `rtax.core.record.run_row`)."""
    phases = {f"{p}_s": 0.01 * (i + 1) for i, p in enumerate(phases_of("cold"))}
    run: dict[str, Any] = dict.fromkeys(RUN_COLUMNS)
    run |= {
        "run_id": run_id,
        "started_at": "2025-01-01T00:00:00.000000+00:00",
        "ended_at": "2025-01-01T00:00:01.000000+00:00",
        "substrate": "local",
        "kind": "local",
        "mode": "exec",
        "launch_type": "cold",
        "vantage": "local",
        "tier": "T0",
        "steps": 0,
        "seed": 0,
        "fidelity": "real",
        "status": "ok",
        "error_class": None,
        "error_message": None,
        **phases,
        "overhead_s": 0.001,
        "wall_s": sum(phases.values()) + 0.001,
        "time_to_first_command_s": phases["create_s"]
        + phases["orchestration_s"]
        + phases["ready_s"],
        "episode_s": 0.5,
        "n_actions": 1,
        "n_actions_done": 1,
        "cleanup_ok": 1,
        "milestones": json.dumps([{"name": "created", "t_s": 0.005}]),
        "host": "test-host",
        "rtax_version": "0.1.0",
        "endpoint": None,
        "provenance": json.dumps({"host": "test-host"}),
    }
    return _set(run, overrides)


def make_action(run_id: str, seq: int, phase: str = "action", **overrides: Any) -> dict[str, Any]:
    """An action row with the keys `_Rollout.command` produces."""
    row: dict[str, Any] = dict.fromkeys(ACTION_COLUMNS)
    row |= {
        "run_id": run_id,
        "seq": seq,
        "phase": phase,
        "idx": seq,
        "category": "exec" if phase == "action" else phase,
        "command": f"echo {seq}",
        "t_offset_s": 0.1 * seq,
        "latency_s": 0.002 + 0.001 * seq,
        "exec_s": 0.001 + 0.001 * seq,
        "exit_code": 0,
        "stdout_bytes": 2,
        "stderr_bytes": 0,
        "ok": 1,
    }
    return _set(row, overrides)


def make_record(
    run_id: str,
    phases: tuple[str, ...] = ("ready", "action"),
    **run_overrides: Any,
) -> RolloutRecord:
    """A run with one action row per entry of `phases`, seq 0, 1, 2, ..."""
    actions = [make_action(run_id, i, p) for i, p in enumerate(phases)]
    return RolloutRecord(run=make_run(run_id, **run_overrides), actions=actions)


def store_load(
    store: Any,
    load_id: str,
    shape: str,
    concurrency: int,
    ttfcs: list[float],
    failures: tuple[str, ...] | list[str] = (),
    *,
    started_at: str,
    **figures: Any,
) -> None:
    """A complete docker load run (`rtax burst`) in `store`: a successful rollout per entry of
    `ttfcs` (its time to first command), a failed one per error class in `failures`, and the
    run's figures (`figures` overriding the defaults)."""
    n = len(ttfcs) + len(failures)
    store.loads.begin(
        {"load_id": load_id, "name": None, "substrate": "docker", "kind": "docker",
         "mode": "exec", "fidelity": "real", "tier": "T0", "steps": 0, "shape": shape, "n": n,
         "every_s": 0.25 if shape == "staggered" else None, "started_at": started_at}
    )  # fmt: skip
    for i, ttfc in enumerate(ttfcs):
        store.save_rollout(
            make_record(f"{load_id}-{i}", substrate="docker", kind="docker", load_id=load_id,
                        load_index=i, time_to_first_command_s=ttfc, started_at=started_at)
        )  # fmt: skip
    for j, error in enumerate(failures, start=len(ttfcs)):
        store.save_rollout(
            make_record(f"{load_id}-{j}", substrate="docker", kind="docker", load_id=load_id,
                        load_index=j, status="failed", error_class=error,
                        time_to_first_command_s=None, started_at=started_at)
        )  # fmt: skip
    store.loads.finish(
        load_id,
        {"status": "complete", "rollouts": n, "ok": len(ttfcs), "ready": len(ttfcs),
         "concurrency": concurrency, "failures": "{}", "harness_cpu_cores": 0.1,
         "dispatch_lag_p50_s": 0.001, "dispatch_lag_max_s": 0.002, **figures},
    )  # fmt: skip


def _set(row: dict[str, Any], overrides: dict[str, Any]) -> dict[str, Any]:
    unknown = set(overrides) - set(row)
    if unknown:
        raise TypeError(f"not a field: {', '.join(sorted(unknown))}")
    return row | overrides
