"""The rollout record: the one declaration of phases, run fields and action fields.

Why one owner (docs/data.md): the probe runner writes these fields, the store keeps them, the
dashboard, statistics, retention and the CSV export read them. Declared once here (like
pytest-benchmark's one ``fields`` tuple), a field added to `RUN_FIELDS` appears in every run row
(`run_row` builds them all, for finished and failed rollouts alike), in the store's column
lists, in the export and in the reference (``python -m rtax.core.record``). A field needs a
migration too (rtax.store.migrations, whose column lists are frozen history); a test checks that a
freshly migrated database holds exactly these fields, in this order.

This module imports nothing of the runner, the store or any substrate: store ← record → probe.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from rtax.core import redaction
from rtax.core.provenance import origin
from rtax.core.series import LOCAL_VANTAGE

#: The consecutive, mutually exclusive phases of a rollout (docs/measurement.md), with
#: what each spans.
PHASE_MEANINGS: dict[str, str] = {
    "create": "request sent → the API accepted and returned",
    "orchestration": "accepted → the substrate reports it running",
    "claim": "warm: claim asked → a pooled, running environment handed over",
    "restore": "restore: restore asked → a fresh environment from a snapshot running",
    "resume": "resume: resume asked → a paused environment running again",
    "ready": "running (or handed over) → the first no-op command succeeded",
    "setup": "the tier's fixed setup (T2: clone)",
    "actions": "the trajectory's actions, summed",
    "cleanup": "delete sent → verified gone",
}
PHASES: tuple[str, ...] = tuple(PHASE_MEANINGS)
#: Phases added after the first schema, whose columns come at the end of runs.
_LATER = frozenset({"claim", "restore", "resume"})
#: How a rollout got its environment (docs/measurement.md#launch-paths): ``cold`` made it
#: (create, orchestration), ``warm`` claimed one from a pool of running ones, ``restore`` made a
#: fresh one from a snapshot taken after set-up, ``resume`` unpaused a paused one. Each is a
#: series of its own, never mixed with another.
LAUNCH_TYPES: tuple[str, ...] = ("cold", "warm", "restore", "resume")
#: The phases up to the first command, per launch type: the launch's own, then ``ready``, the
#: first no-op command that succeeded, on every launch type alike (so that time to first
#: command means one thing for all four).
START_PHASES: dict[str, tuple[str, ...]] = {
    "cold": ("create", "orchestration", "ready"),
    "warm": ("claim", "ready"),
    "restore": ("restore", "ready"),
    "resume": ("resume", "ready"),
}
#: The phase a launched environment is handed over in, per launch type other than cold.
LAUNCH_PHASE: dict[str, str] = {"warm": "claim", "restore": "restore", "resume": "resume"}


def phases_of(launch_type: str | None) -> tuple[str, ...]:
    """The phases a rollout of `launch_type` has (None: an old row, cold)."""
    own = START_PHASES[launch_type or "cold"]
    others = {p for phases in START_PHASES.values() for p in phases} - set(own)
    return tuple(p for p in PHASES if p not in others)


#: The parts of a rollout's wall time: its phases and the harness's own overhead. They add up.
PHASE_COLUMNS: tuple[str, ...] = (*(f"{p}_s" for p in PHASES), "overhead_s")
#: Per phase, the poll gap at which its end was detected (docs/measurement.md#resolution).
RESOLUTION_COLUMNS: tuple[str, ...] = tuple(f"{p}_res_s" for p in PHASES)
#: The derived per-run metrics and the phases each one spans (so its resolution is theirs, summed).
_STARTS: tuple[str, ...] = ("create", "orchestration", "claim", "restore", "resume", "ready")
METRIC_PHASES: dict[str, tuple[str, ...]] = {
    "time_to_first_command_s": _STARTS,
    "episode_s": (*_STARTS, "setup", "actions"),
    "wall_s": PHASES,
}
METRIC_COLUMNS: tuple[str, ...] = tuple(METRIC_PHASES)
#: Per run phase, the ``phase`` of its commands' action rows (an action row's is singular).
ACTION_PHASE: dict[str, str] = {"ready": "ready", "setup": "setup", "actions": "action"}
#: A run's error message is cut to this many characters: a row is read, it is not a log.
MESSAGE_CHARS = 1000


@dataclass(frozen=True)
class Field:
    """One column of a record: its name, type and meaning.

    `since` is the schema version whose migration added it (rtax.store.migrations); `page` says the
    dashboard's pages read it (free text, JSON and bookkeeping stay in the database and CSV)."""

    name: str
    type: type
    meaning: str
    since: int = 1
    page: bool = False


#: Every column of ``runs``, in stored order: a new field goes at the end, with a migration.
RUN_FIELDS: tuple[Field, ...] = (
    Field("run_id", str, "the rollout's unique id", page=True),
    Field("started_at", str, "when the rollout started (ISO 8601, UTC)", page=True),
    Field("ended_at", str, "when its record was made, after cleanup (ISO 8601, UTC)"),
    Field("substrate", str, "the substrate's configured name", page=True),
    Field("kind", str, "the substrate's kind (local, docker, kubernetes, ...)", page=True),
    Field("tier", str, "workload tier: T0, T1 or T2", page=True),
    Field("steps", int, "trajectory length (0: the tier's fixed actions)", page=True),
    Field("seed", int, "seed of the trajectory's action mix"),
    Field("fidelity", str, "real, emulated, modelled or unknown", page=True),
    Field("status", str, "ok or failed", page=True),
    Field(
        "error_class", str, "why it failed (docs/measurement.md#failures); NULL if ok", page=True
    ),
    Field("error_message", str, f"the failure, at most {MESSAGE_CHARS} characters"),
    *(
        Field(f"{p}_s", float, f"{p} phase (s): {m}", page=True)
        for p, m in PHASE_MEANINGS.items()
        if p not in _LATER  # added later (v10, v13), at the end
    ),
    Field("overhead_s", float, "wall time minus the phases: the harness's own cost (s)", page=True),
    Field(
        "wall_s",
        float,
        "the create (or claim, restore, resume) request → the end of cleanup (s)",
        page=True,
    ),
    Field(
        "time_to_first_command_s",
        float,
        "the launch's phases + ready (cold: create + orchestration + ready) (s), to the first "
        "successful command on every launch type; NULL unless it got there",
        page=True,
    ),
    Field(
        "episode_s",
        float,
        "the launch request → the end of the last action (s); NULL if not reached",
        page=True,
    ),
    Field("n_actions", int, "actions in the workload", page=True),
    Field("n_actions_done", int, "actions completed", page=True),
    Field("cleanup_ok", int, "1 cleanup verified, 0 failed, NULL nothing to clean", page=True),
    Field("milestones", str, "substrate-native milestones, JSON [{name, t_s from create/claim}]"),
    Field("host", str, "the host the probe ran on"),
    Field("rtax_version", str, "the rtax that measured it"),
    Field("endpoint", str, "the substrate's endpoint, where it has one"),
    Field("provenance", str, "JSON: versions, platform, the substrate's own description"),
    Field("mode", str, "action mode: exec (a call per command) or session", since=2, page=True),
    Field("plan", str, "the scheduler plan that made it; NULL from the CLI", since=3),
    Field(
        "scheduled_at",
        str,
        "when that plan, or its launch in a load run, was due (lag = started_at - this)",
        since=3,
    ),
    *(
        Field(f"{p}_res_s", float, f"resolution of the {p} phase's end (s)", since=5, page=True)
        for p in PHASES
        if p not in _LATER
    ),
    Field("toolchain", str, "the workload toolchain's digest", since=6, page=True),
    Field(
        "load_id",
        str,
        "the load run that launched it (docs/load.md); NULL if none",
        since=9,
        page=True,
    ),
    Field("load_index", int, "its launch order in that load run (0 = the first)", since=9),
    Field("claim_s", float, f"claim phase (s): {PHASE_MEANINGS['claim']}", since=10, page=True),
    Field("claim_res_s", float, "resolution of the claim phase's end (s)", since=10, page=True),
    Field(
        "launch_type",
        str,
        "cold (made), warm (claimed from a pool), restore (from a snapshot) or resume (unpaused)",
        since=10,
        page=True,
    ),
    Field(
        "vantage",
        str,
        "where the probe ran (docs/ray.md#vantages): a Ray node's label, else local",
        since=11,
        page=True,
    ),
    *(
        field
        for p in ("restore", "resume")
        for field in (
            Field(f"{p}_s", float, f"{p} phase (s): {PHASE_MEANINGS[p]}", since=13, page=True),
            Field(
                f"{p}_res_s", float, f"resolution of the {p} phase's end (s)", since=13, page=True
            ),
        )
    ),
)
#: Every column of ``actions`` (one row per command: ready attempts, setup, actions).
ACTION_FIELDS: tuple[Field, ...] = (
    Field("run_id", str, "the run it belongs to"),
    Field("seq", int, "its order in the run"),
    Field("phase", str, "ready, setup or action"),
    Field("idx", int, "its index in its phase (a ready row: the attempt's number)"),
    Field("category", str, "what it does (ready, clone, inspect, edit, test, ...)"),
    Field("command", str, "the shell command"),
    Field("exit_code", int, "the command's exit code; NULL if it never returned"),
    Field("latency_s", float, "the runner's time around the substrate call (s)"),
    Field("exec_s", float, "the substrate's own time for the command (s)"),
    Field("t_offset_s", float, "when it started, from the create request (s)"),
    Field("stdout_bytes", int, "bytes of standard output"),
    Field("stderr_bytes", int, "bytes of standard error"),
    Field("ok", int, "1 if it did what the workload needs"),
    Field("error_class", str, "why it failed; NULL if ok"),
    Field("detail", str, "the failure's detail (the tail of its output)"),
    Field("resolution_s", float, "the poll gap at which its end was detected (s)", since=5),
)
RUN_COLUMNS: tuple[str, ...] = tuple(f.name for f in RUN_FIELDS)
ACTION_COLUMNS: tuple[str, ...] = tuple(f.name for f in ACTION_FIELDS)
#: The run columns the dashboard's pages read.
PAGE_COLUMNS: tuple[str, ...] = tuple(f.name for f in RUN_FIELDS if f.page)
#: (run column, its name on an action row): the run's context every read or exported action
#: row carries, so that an action is never out of context.
ACTION_CONTEXT: tuple[tuple[str, str], ...] = (
    ("substrate", "substrate"),
    ("kind", "kind"),
    ("mode", "mode"),
    ("tier", "tier"),
    ("steps", "steps"),
    ("fidelity", "fidelity"),
    ("launch_type", "launch_type"),
    ("vantage", "vantage"),
    ("status", "run_status"),
    ("started_at", "run_started_at"),
)


@dataclass
class RolloutRecord:
    """A finished rollout: one run row and its action rows, ready for `Store.save_rollout`."""

    run: dict[str, Any]
    actions: list[dict[str, Any]] = field(default_factory=list)

    def __post_init__(self) -> None:
        # Scrubbed as it is made: a failing command's output (``detail``) or an error message
        # may carry a secret rtax holds, and from here a record goes to the database, the spool
        # and the CSVs (docs/configuration.md#secrets).
        secrets = redaction.held()
        if secrets:
            self.run = redaction.scrub_value(self.run, secrets)
            self.actions = redaction.scrub_value(self.actions, secrets)

    @property
    def ok(self) -> bool:
        return self.run["status"] == "ok"


def utcnow() -> str:
    """Now as the records spell time: ISO 8601, UTC, microseconds."""
    return datetime.now(UTC).isoformat(timespec="microseconds")


@dataclass(frozen=True)
class RolloutIdentity:
    """What a rollout was, as every row of it says: the substrate it ran on (name, kind, action
    mode, fidelity, launch type) and the workload it ran (tier, steps, seed, how many actions).

    Why one value (docs/data.md): a rollout's description used to travel as a dozen loose
    arguments from the CLI to the record, in three builders that each listed them again. Made
    once where the substrate and workload are known (`rtax.rollouts.rollout.identity`), it is
    what `run_row` and `failed_record` take. `fidelity` has no default: a row can never fall
    back to ``real`` (docs/measurement.md#fidelity)."""

    substrate: str
    kind: str
    fidelity: str
    tier: str
    steps: int = 0
    seed: int = 0
    #: "exec" or "session"; None for kinds without action modes (stored as "exec")
    mode: str | None = None
    launch_type: str = "cold"
    #: the workload's actions (a failed record without a workload: its steps)
    n_actions: int = 0

    def fields(self) -> dict[str, Any]:
        """The run row's fields this identity fills."""
        return {
            "substrate": self.substrate,
            "kind": self.kind,
            "mode": self.mode or "exec",
            "launch_type": self.launch_type,
            "tier": self.tier,
            "steps": self.steps,
            "seed": self.seed,
            "fidelity": self.fidelity,
            "n_actions": self.n_actions,
        }


@dataclass(frozen=True)
class Timings:
    """What the probe runner measured of one rollout (none of it for a rollout that never
    started): the phases, their resolutions, the wall time, the milestones and the action
    rows, and how the rollout got its environment (`launch_type`)."""

    phases: Mapping[str, float] | None = None
    resolutions: Mapping[str, float | None] | None = None
    wall_s: float | None = None
    milestones: Sequence[Mapping[str, Any]] = ()
    actions: Sequence[Mapping[str, Any]] = ()
    launch_type: str = "cold"


def run_row(
    identity: RolloutIdentity,
    *,
    run_id: str,
    started_at: str,
    error_class: str | None,
    error_message: str | None,
    provenance: Mapping[str, Any],
    timings: Timings = Timings(),
    **measured: Any,
) -> dict[str, Any]:
    """The one builder of a run row: every field of `RUN_FIELDS`, None unless given.

    It derives what every row derives the same way (docs/measurement.md): the status
    from the error class; the end time; the phase columns and their resolutions
    (`_phase_columns`); the overhead and time to first command (`_derived`); host, version,
    endpoint and toolchain from the provenance. `measured` takes the remaining fields by name
    (``episode_s``, ``plan``, ...); any other name, or a derived one, is refused."""
    unknown = set(measured) - set(RUN_COLUMNS)
    derived = set(measured) & _DERIVED
    if unknown or derived:
        raise TypeError(f"not a run field to pass: {', '.join(sorted(unknown | derived))}")
    described = provenance.get("substrate") or {}
    row: dict[str, Any] = dict.fromkeys(RUN_COLUMNS)
    row.update(
        identity.fields(),
        run_id=run_id,
        started_at=started_at,
        ended_at=utcnow(),
        vantage=LOCAL_VANTAGE,
        status="ok" if error_class is None else "failed",
        error_class=error_class,
        error_message=(error_message or "")[:MESSAGE_CHARS] or None,
        wall_s=timings.wall_s,
        milestones=json.dumps(list(timings.milestones)),
        host=provenance["host"],
        rtax_version=provenance["rtax_version"],
        endpoint=described.get("endpoint"),
        toolchain=(described.get("toolchain") or {}).get("digest"),
        provenance=json.dumps(provenance, sort_keys=True, default=str),
    )
    row.update(_phase_columns(timings))
    row.update(_derived(timings))
    row.update(measured)
    if row["launch_type"] not in LAUNCH_TYPES:
        raise ValueError(f"launch_type must be one of {LAUNCH_TYPES}, not {row['launch_type']!r}")
    return row


def _phase_columns(timings: Timings) -> dict[str, Any]:
    """Each phase's column and its resolution: for setup and actions the sum over their
    commands' (each polled detection can be late by its resolution), else as reported."""
    resolved = dict(timings.resolutions or {})
    for phase in ("setup", "actions"):
        polled = [
            r["resolution_s"]
            for r in timings.actions
            if r["phase"] == ACTION_PHASE[phase] and r.get("resolution_s") is not None
        ]
        if polled:
            resolved[phase] = sum(polled)
    phases = timings.phases or {}
    out: dict[str, Any] = {}
    for p in PHASES:
        out[f"{p}_s"] = phases.get(p)
        out[f"{p}_res_s"] = resolved.get(p)
    return out


def _derived(timings: Timings) -> dict[str, Any]:
    """The overhead (wall time minus the phases, when they were timed at all) and time to
    first command: the launch type's start phases, only once a ready command succeeded, on
    every launch type (docs/measurement.md#launch-paths)."""
    phases = timings.phases
    if phases is None:
        return {}
    out: dict[str, Any] = {}
    if timings.wall_s is not None:
        out["overhead_s"] = timings.wall_s - sum(phases.values())
    first = START_PHASES[timings.launch_type]
    if all(p in phases for p in first) and any(
        r["phase"] == "ready" and r.get("ok") for r in timings.actions
    ):
        out["time_to_first_command_s"] = sum(phases[p] for p in first)
    return out


#: The run fields `run_row` derives itself, never passed in.
_DERIVED = frozenset(
    {
        "status",
        "ended_at",
        "overhead_s",
        "time_to_first_command_s",
        "host",
        "rtax_version",
        "endpoint",
        "toolchain",
        *(f"{p}_s" for p in PHASES),
        *RESOLUTION_COLUMNS,
    }
)


def action_row(**values: Any) -> dict[str, Any]:
    """An action row: every field of `ACTION_FIELDS`, None unless given; unknown names refused."""
    unknown = set(values) - set(ACTION_COLUMNS)
    if unknown:
        raise TypeError(f"not an action field: {', '.join(sorted(unknown))}")
    return {**dict.fromkeys(ACTION_COLUMNS), **values}


def failed_record(
    identity: RolloutIdentity,
    run_id: str,
    started: datetime,
    error_class: str,
    message: str,
    *,
    wall_s: float | None,
) -> RolloutRecord:
    """The record of a rollout that produced none itself (it never started, or its thread never
    returned): failed, classified, phases unknown, built by `run_row` like every other. The
    identity's fidelity is the substrate's (or, if it could not be built, what its
    configuration says, else `UNKNOWN_FIDELITY`); its launch type is ``warm`` when the rollout
    would have claimed from a warm pool (its failure belongs to the warm series)."""
    run = run_row(
        identity,
        run_id=run_id,
        started_at=started.isoformat(timespec="microseconds"),
        error_class=error_class,
        error_message=message,
        provenance=origin(),
        timings=Timings(wall_s=wall_s),
    )
    return RolloutRecord(run=run, actions=[])


def reference(fields: Sequence[Field]) -> str:
    """`fields` as a Markdown table (name, type, meaning, schema version), for the docs."""
    lines = ["| field | type | meaning | since |", "|---|---|---|---|"]
    lines += [f"| `{f.name}` | {f.type.__name__} | {f.meaning} | v{f.since} |" for f in fields]
    return "\n".join(lines)


if __name__ == "__main__":
    print(f"## runs\n\n{reference(RUN_FIELDS)}\n\n## actions\n\n{reference(ACTION_FIELDS)}")
