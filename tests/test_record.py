"""rtax.core.record is the one owner of the run and action fields (docs/data.md).

The property: every field it declares is a column of a freshly migrated store, in the same
order and type, and nothing else is; each migration adds exactly the fields that say they came
with it; a run row has the same keys whichever path built it (a finished rollout or
`failed_record`); the store's export, the dashboard's subset and the statistics' columns are
all drawn from it."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path

import pandas as pd
import pytest
import sqlite_utils

from factories import make_record
from rtax.core import record
from rtax.core.failures import ExecError
from rtax.core.provenance import origin
from rtax.core.record import (
    ACTION_COLUMNS,
    ACTION_FIELDS,
    RUN_COLUMNS,
    RUN_FIELDS,
    RolloutIdentity,
    Timings,
    failed_record,
    run_row,
)
from rtax.core.workloads import Action, Workload
from rtax.rollouts.rollout import run_rollout
from rtax.store.database import Store
from rtax.store.migrations import MIGRATIONS, SCHEMA_VERSION
from rtax.substrates.base import CommandResult, Environment


def _columns(db: sqlite_utils.Database, table: str) -> list[tuple[str, type]]:
    return list(db[table].columns_dict.items()) if db[table].exists() else []


def test_a_fresh_store_has_exactly_the_declared_fields_in_order(tmp_path: Path) -> None:
    with Store(tmp_path / "x.db") as store:
        assert _columns(store.db, "runs") == [(f.name, f.type) for f in RUN_FIELDS]
        assert _columns(store.db, "actions") == [(f.name, f.type) for f in ACTION_FIELDS]


@pytest.mark.parametrize("version", range(1, SCHEMA_VERSION + 1))
def test_each_migration_adds_the_fields_that_name_it(tmp_path: Path, version: int) -> None:
    """`Field.since` is the truth about history: up to each version, the migrated tables hold
    exactly the fields declared as added by then (so a new field without its migration, or a
    migration without its declaration, fails here)."""
    db = sqlite_utils.Database(tmp_path / "x.db")
    for v, migration in MIGRATIONS:
        if v <= version:
            migration(db)
    runs = [(f.name, f.type) for f in RUN_FIELDS if f.since <= version]
    actions = [(f.name, f.type) for f in ACTION_FIELDS if f.since <= version]
    assert _columns(db, "runs") == runs
    assert _columns(db, "actions") == actions


def test_field_names_are_unique_and_every_field_has_a_meaning() -> None:
    for fields in (RUN_FIELDS, ACTION_FIELDS):
        names = [f.name for f in fields]
        assert len(names) == len(set(names))
        assert all(f.meaning and "\n" not in f.meaning for f in fields)
        assert [f.since for f in fields] == sorted(f.since for f in fields)  # new ones last


def test_the_derived_column_sets_are_drawn_from_the_fields() -> None:
    for columns in (
        record.PHASE_COLUMNS,
        record.RESOLUTION_COLUMNS,
        record.METRIC_COLUMNS,
        record.PAGE_COLUMNS,
        tuple(column for column, _ in record.ACTION_CONTEXT),
    ):
        assert set(columns) <= set(RUN_COLUMNS), columns
    assert set(record.ACTION_PHASE) <= set(record.PHASES)  # the phases that run commands
    for phases in record.METRIC_PHASES.values():
        assert set(phases) <= set(record.PHASES)


class _Fake:
    """A substrate whose every call succeeds at once (or whose commands fail, if told)."""

    name, kind, fidelity, mode = "fake", "fake", "real", "session"

    def __init__(self, fail: bool = False) -> None:
        self.fail = fail

    def create(self, run_id: str, *, lifetime_s: float | None = None) -> Environment:
        return Environment(env_id="fake-1", run_id=run_id)

    def wait_running(self, env: Environment, timeout_s: float) -> None:
        env.resolution["orchestration"] = 0.125

    def run(self, env: Environment, command: str, timeout_s: float) -> CommandResult:
        if self.fail and command != "true":
            raise ExecError("the command could not be run")
        return CommandResult(0, "out", "", 0.001, resolution_s=0.25)

    def destroy(self, env: Environment, timeout_s: float) -> None:
        pass

    def describe(self) -> dict:
        return {"endpoint": "fake://here", "toolchain": {"digest": "tc-1"}}


_WORKLOAD = Workload(
    tier="T1",
    steps=2,
    seed=3,
    setup=(Action("setup", "echo setup"),),
    actions=(Action("exec", "echo a"), Action("exec", "echo b")),
)


@pytest.mark.parametrize("fail", [False, True])
def test_a_rollout_and_a_failed_record_have_exactly_the_same_keys(fail: bool) -> None:
    finished = run_rollout(_Fake(fail), _WORKLOAD, run_id="r1")
    lost = failed_record(
        RolloutIdentity("fake", "fake", "unknown", _WORKLOAD.tier, _WORKLOAD.steps, n_actions=2),
        "r2",
        datetime.now(UTC),
        "setup_error",
        "no",
        wall_s=None,
    )
    assert list(finished.run) == list(RUN_COLUMNS)
    assert list(lost.run) == list(RUN_COLUMNS)
    assert finished.actions and all(list(row) == list(ACTION_COLUMNS) for row in finished.actions)
    assert finished.ok is not fail and lost.ok is False


def test_a_finished_rollout_row_derives_what_the_model_says() -> None:
    run = run_rollout(_Fake(), _WORKLOAD, run_id="r1").run
    assert run["launch_type"] == "cold"  # it made its environment: no other launch phase
    assert (run["claim_s"], run["restore_s"], run["resume_s"]) == (None, None, None)
    phases = [run[f"{p}_s"] for p in record.phases_of("cold")] + [run["overhead_s"]]
    assert sum(phases) == pytest.approx(run["wall_s"])
    first = ("create", "orchestration", "ready")
    assert run["time_to_first_command_s"] == pytest.approx(sum(run[f"{p}_s"] for p in first))
    assert run["orchestration_res_s"] == 0.125  # reported by the substrate
    assert run["setup_res_s"] == 0.25 and run["actions_res_s"] == 0.5  # summed over commands
    assert (run["endpoint"], run["toolchain"], run["mode"]) == ("fake://here", "tc-1", "session")
    assert (run["status"], run["n_actions"], run["n_actions_done"]) == ("ok", 2, 2)


def test_a_failed_record_keeps_only_what_is_known() -> None:
    row = failed_record(
        RolloutIdentity("k8s", "kubernetes", "emulated", "T1", 2, 3, n_actions=2),
        "r2",
        datetime.now(UTC),
        "setup_error",
        "x" * 5000,
        wall_s=3.0,
    ).run
    assert (row["status"], row["mode"], row["fidelity"], row["wall_s"]) == (
        "failed",
        "exec",
        "emulated",
        3.0,
    )
    assert len(row["error_message"]) == record.MESSAGE_CHARS
    assert row["overhead_s"] is None  # no phase was timed: nothing to subtract
    known = {"run_id", "started_at", "ended_at", "substrate", "kind", "mode", "tier", "steps"}
    known |= {"seed", "fidelity", "status", "error_class", "error_message", "wall_s"}
    known |= {"n_actions", "milestones", "host", "rtax_version", "provenance", "launch_type"}
    known |= {"vantage"}
    assert {k for k, v in row.items() if v is not None} == known


def test_run_row_refuses_unknown_and_derived_fields() -> None:
    who = RolloutIdentity("s", "k", "real", "T0")
    base = dict(
        run_id="r",
        started_at="2025-01-01T00:00:00+00:00",
        error_class=None,
        error_message=None,
        provenance=origin(),
    )
    for bad in ("episode", "status", "time_to_first_command_s", "create_s", "toolchain"):
        with pytest.raises(TypeError, match=bad):
            run_row(who, **base, **{bad: 1})
    assert run_row(who, **base, plan="nightly")["plan"] == "nightly"
    with pytest.raises(TypeError, match="latency"):
        record.action_row(latency=1.0)


def test_time_to_first_command_needs_a_successful_ready_command() -> None:
    phases = {"create": 1.0, "orchestration": 2.0, "ready": 4.0}
    who = RolloutIdentity("s", "k", "real", "T0")
    kw = dict(
        run_id="r",
        started_at="t",
        error_class="ready_timeout",
        error_message="m",
        provenance=origin(),
    )
    refused = record.action_row(phase="ready", ok=0)
    timed = Timings(phases=phases, wall_s=8.0, actions=[refused])
    assert run_row(who, **kw, timings=timed)["time_to_first_command_s"] is None
    accepted = record.action_row(phase="ready", ok=1)
    row = run_row(who, **kw, timings=replace(timed, actions=[refused, accepted]))
    assert row["time_to_first_command_s"] == 7.0
    assert row["overhead_s"] == 1.0


def test_every_launch_types_first_command_ends_at_its_first_successful_command() -> None:
    """Warm, restore and resume (docs/measurement.md#launch-paths): the handover phase, then
    the ready phase's first `true`, as a cold run's create and orchestration are followed by
    it, so time to first command means one thing on every path; a claim that handed nothing
    over (it timed out) has no time to first command, and its wait still counts in the wall."""
    warm = RolloutIdentity("s", "k", "real", "T0", launch_type="warm")
    kw = dict(
        run_id="r",
        started_at="t",
        error_class=None,
        error_message=None,
        provenance=origin(),
    )
    ready = [{"phase": "ready", "ok": 1}]
    phases = {"claim": 0.25, "ready": 0.0625, "actions": 0.5, "cleanup": 0.125}
    timings = Timings(phases=phases, wall_s=1.0, actions=ready, launch_type="warm")
    row = run_row(warm, **kw, timings=timings)
    assert (row["time_to_first_command_s"], row["claim_s"], row["create_s"]) == (
        0.3125,
        0.25,
        None,
    )
    assert row["overhead_s"] == 0.0625 and row["launch_type"] == "warm"
    for launch in ("restore", "resume"):
        own = {launch: 0.5, "ready": 0.25, "actions": 0.125}
        done = run_row(
            replace(warm, launch_type=launch),
            **kw,
            timings=Timings(phases=own, wall_s=1.0, actions=ready, launch_type=launch),
        )
        assert done["time_to_first_command_s"] == 0.75 and done[f"{launch}_s"] == 0.5
    refused = Timings(phases=phases, wall_s=1.0, actions=[{"phase": "ready", "ok": 0}])
    assert run_row(warm, **kw, timings=refused)["time_to_first_command_s"] is None
    waited = run_row(
        warm,
        **{**kw, "error_class": "claim_timeout"},
        timings=Timings(phases={"claim": 1.0}, wall_s=1.0, launch_type="warm"),
    )
    assert waited["time_to_first_command_s"] is None and waited["overhead_s"] == 0.0
    cold = replace(warm, launch_type="cold")
    assert (
        run_row(cold, **kw, timings=Timings(phases=phases, wall_s=1.0))["time_to_first_command_s"]
        is None
    )
    assert record.phases_of("warm") == ("claim", "ready", "setup", "actions", "cleanup")
    assert record.phases_of("restore") == ("restore", "ready", "setup", "actions", "cleanup")
    assert record.phases_of(None) == record.phases_of("cold")
    assert "claim" not in record.phases_of("cold")
    with pytest.raises(ValueError, match="launch_type"):
        run_row(replace(warm, launch_type="tepid"), **kw)


def test_the_export_is_in_field_order(tmp_path: Path) -> None:
    with Store(tmp_path / "x.db") as store:
        store.save_rollout(make_record("r1"))
        store.runs.export_csv("runs", tmp_path / "runs.csv")
        store.runs.export_csv("actions", tmp_path / "actions.csv")
    assert list(pd.read_csv(tmp_path / "runs.csv").columns) == list(RUN_COLUMNS)
    context = [name for _, name in record.ACTION_CONTEXT]
    assert list(pd.read_csv(tmp_path / "actions.csv").columns) == [*ACTION_COLUMNS, *context]


def test_the_reference_lists_every_field_once() -> None:
    text = record.reference(RUN_FIELDS)
    for field in RUN_FIELDS:
        assert text.count(f"| `{field.name}` |") == 1
    assert len(text.splitlines()) == len(RUN_FIELDS) + 2
