"""The execution engine: where a rollout runs once the scheduler has chosen it (docs/ray.md).

Why an engine apart from the scheduler: what to probe and when (plans, budgets, the misfire
grace) is the scheduler's; where the probe runs is not. One machine stops being enough when a
burst saturates its client or a fleet spans regions, and the RL stacks rtax serves already run
on Ray, so a rollout can run in the scheduler's own threads (`LocalEngine`, the default) or as
a Ray task on a node of an existing cluster (`rtax.rollouts.engines.ray.RayEngine`). Both take the
same `RolloutSpec`, plain data chosen before dispatch (the run id included, so a result is stored
once whatever the engine does), and hand back a future of the finished record, which the one
writer (the scheduler's spool) stores. `rtax burst` can drive the same engines.

- A spec names credentials, never carries them: its substrate entry holds ``*_env`` parameters
  (the names of environment variables), which `rtax.substrates.build_substrate` reads where the
  rollout runs: on a Ray node, from the node's own environment.
- Every record is stamped with its vantage (where it ran: ``local``, or a Ray node's label) and
  its engine in provenance.
- The engine's own failures (a node lost mid-rollout, no node for a vantage) are
  ``engine_error`` rows: rtax's trouble, counted with the harness errors, never a substrate's
  (docs/ray.md#failures).
"""

from __future__ import annotations

import json
import sqlite3
import uuid
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Protocol

from rtax.core import workloads
from rtax.core.failures import HARNESS_ERROR, SETUP_ERROR, HarnessError
from rtax.core.record import RolloutIdentity, RolloutRecord, failed_record
from rtax.core.workloads import RepoSource, Workload
from rtax.settings import SubstrateConfig
from rtax.store.database import StoreError
from rtax.substrates import configured_fidelity, reaper
from rtax.substrates.base import Substrate

Log = Callable[[str], None]


@dataclass(frozen=True)
class RolloutSpec:
    """One rollout to run, as plain data: what a Ray task receives as its only argument. No
    secret is in it (the substrate entry names its credentials' variables, ``*_env``)."""

    substrate: SubstrateConfig
    tier: str
    steps: int = 0
    seed: int = 0
    deadline_s: float = 900.0
    #: parameters over the entry's (the plan's action mode)
    overrides: Mapping[str, Any] = field(default_factory=dict)
    #: the vantage to run from (Ray: a node with that label; None: wherever, spread)
    vantage: str | None = None
    #: chosen before dispatch: the one name of this rollout, whatever the engine retries
    run_id: str = field(default_factory=lambda: uuid.uuid4().hex)


class Engine(Protocol):
    """What the scheduler needs of an engine."""

    name: str

    def start(self) -> None: ...

    def submit(self, spec: RolloutSpec) -> Future[RolloutRecord | None]:
        """Run `spec`; the future's record, or None when the rollout was cancelled (stopping:
        half a rollout is no sample)."""
        ...

    def prepare(self, conf: SubstrateConfig, log: Log) -> None:
        """Make `conf`'s substrate ready where rollouts will run (an image, a toolchain);
        raise when it can't be."""
        ...

    def sweep(self, confs: Sequence[SubstrateConfig], log: Any) -> list[reaper.Orphan]:
        """Reap the leftovers of `confs` wherever this engine's rollouts leave them."""
        ...

    def close(self) -> None: ...


# -- what every engine shares ---------------------------------------------------------------------


def failure(
    spec: RolloutSpec, error_class: str, message: str, fidelity: str | None = None
) -> RolloutRecord:
    """The record of a rollout of `spec` that produced none itself, classified."""
    conf = spec.substrate
    described = RolloutIdentity(
        substrate=conf.name,
        kind=conf.kind,
        fidelity=fidelity or configured_fidelity(conf),
        tier=spec.tier,
        steps=spec.steps,
        seed=spec.seed,
        mode=spec.overrides.get("mode") or conf.params.get("mode"),
        # a rollout that would have claimed from a warm pool fails in the warm series
        launch_type="warm" if getattr(conf, "pool", None) else "cold",
        n_actions=spec.steps,
    )
    return failed_record(
        described, spec.run_id, datetime.now(UTC), error_class, message, wall_s=None
    )


def setup_failure(
    spec: RolloutSpec, exc: BaseException, fidelity: str | None = None
) -> RolloutRecord:
    """A rollout that could not even start is a failure too, kept as a row. rtax's own trouble
    (its git daemon, its database) is a `harness_error`; anything else (the substrate could not
    be built or reached) a `setup_error`. `fidelity`: the substrate's, when it was built."""
    harness = isinstance(exc, (HarnessError, StoreError, sqlite3.Error))
    error_class = HARNESS_ERROR if harness else SETUP_ERROR
    return failure(spec, error_class, f"{type(exc).__name__}: {exc}", fidelity)


def build(
    spec: RolloutSpec,
    make: Callable[[SubstrateConfig, dict[str, Any]], Substrate],
    source: Callable[[Substrate], RepoSource],
    ready: Callable[[Substrate], None] | None = None,
) -> tuple[Substrate, Workload] | RolloutRecord:
    """`spec`'s substrate (`make`, then `ready` when given) and workload (T2 from `source`),
    or the setup failure's record."""
    try:
        substrate = make(spec.substrate, dict(spec.overrides))
    except Exception as exc:
        return setup_failure(spec, exc)
    try:
        if ready is not None:
            ready(substrate)
        repo = source(substrate) if spec.tier == "T2" else None
        workload = workloads.build(spec.tier, steps=spec.steps, seed=spec.seed, source=repo)
    except Exception as exc:
        return setup_failure(spec, exc, substrate.fidelity)
    return substrate, workload


def stamp(record: RolloutRecord, vantage: str, engine: Mapping[str, Any]) -> RolloutRecord:
    """`record` with its vantage, and its engine (where and how it ran) in provenance."""
    record.run["vantage"] = vantage
    try:
        provenance = json.loads(record.run.get("provenance") or "{}")
    except ValueError:
        provenance = {}
    provenance["engine"] = dict(engine)
    record.run["provenance"] = json.dumps(provenance, sort_keys=True, default=str)
    return record


def settle(future: Future[RolloutRecord | None], outcome: RolloutRecord | None) -> bool:
    """Resolve `future` with `outcome` unless something already did: the first outcome of a
    rollout wins (a late result after a backstop, a retried task's), so that it is stored
    once. Whether this one won."""
    try:
        future.set_result(outcome)
    except Exception:  # InvalidStateError: already resolved
        return False
    return True
