"""The substrate protocol: one environment's life, with one meaning for every kind of substrate.

Why a protocol and nothing more: the probe runner (`rtax.rollouts.rollout`) times each step of this
life and must never know which substrate it is timing, so that "create" or "ready" means the same
thing for a directory, a container, a pod or a VM (docs/measurement.md). A substrate never touches
the store and never times its own phases; it only does the work and may mark native milestones.
What substrates share beyond this contract (labels, leftovers, rate-limit retries, polling,
command timeouts) is in `rtax.substrates.kit`, so that each kind's file holds only its API.

Life of one environment::

    sub.prepare(log)                     # once, before any clock starts: build what is missing
    env = sub.create(run_id, lifetime_s=...)  # request sent -> the API accepted and returned
    sub.wait_running(env, timeout_s)     # accepted -> the substrate reports it running
    sub.run(env, "true", timeout_s)      # commands; the first successful one is "ready"
    sub.destroy(env, timeout_s)          # delete, then verify that it is gone
    sub.leftovers()                      # labelled environments still there (`rtax reap`
                                         # destroys the orphans among them)
    sub.describe()                       # provenance, stored with every sample
    sub.close()                          # release clients and connections

plus the attributes `name`, `kind`, `fidelity`, `mode` and `host_address`.

A substrate that keeps environments made in advance (a warm pool, `rtax.substrates.pool`) also
speaks `Claims`: ``sub.claim(run_id, lifetime_s=..., timeout_s=...)`` hands over one that is
already created, running and ready, and the probe runner times that one call as the rollout's
``claim`` phase in place of create, orchestration and ready (docs/measurement.md#warm-pools).
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from rtax.core import redaction
from rtax.core.failures import SubstrateError
from rtax.core.workloads import Action, Workload

#: The one clock for durations and milestones: monotonic, high resolution. Wall-clock time is used
#: only for UTC timestamps, never for durations.
clock = time.perf_counter

#: How trustworthy a sample is (docs/measurement.md#fidelity).
FIDELITIES = ("real", "emulated", "modelled")

#: The label every rtax-made environment carries, so that leftovers can be found after a crash.
LABEL = "rtax"
#: The no-op command whose first success makes an environment ready (docs/measurement.md).
READY_COMMAND = "true"


@dataclass(frozen=True)
class CommandResult:
    """What one command returned. `latency_s` is the substrate's own timing of its call."""

    exit_code: int
    stdout: str
    stderr: str
    latency_s: float
    #: Bytes the command wrote, when the substrate kept only part of a long output.
    stdout_bytes: int | None = None
    stderr_bytes: int | None = None
    #: When the substrate learned that the command finished by polling (SSM's
    #: GetCommandInvocation), the poll gap at detection (`rtax.substrates.poll`); None when the
    #: answer came with the call itself (docs/measurement.md#resolution).
    resolution_s: float | None = None


@dataclass(frozen=True)
class Milestone:
    """A substrate-native event (pod scheduled, container started, ...) on the `clock` timeline."""

    name: str
    t: float


@dataclass(frozen=True)
class RateLimitWait:
    """One pause a substrate made because the service asked it to slow down (HTTP 429 or a
    throttling code), kept so that a sample slowed by rate limiting says so in its provenance
    (`rtax.substrates.kit.RetryPolicy`)."""

    #: the call that was refused ("pod create", "RunInstances", ...)
    call: str
    #: the attempt that was refused (1 = the first)
    attempt: int
    #: how long the substrate waited before the next attempt
    wait_s: float
    #: what the service's Retry-After asked for, when it sent one
    retry_after_s: float | None = None


@dataclass
class Environment:
    """A handle on one live environment. `handle` is private to the substrate that made it;
    None for an environment found by its label (`Leftover`), which `destroy` must accept too."""

    env_id: str
    run_id: str | None
    handle: Any = None
    milestones: list[Milestone] = field(default_factory=list)
    #: Per phase ("orchestration", "cleanup", ...): the poll gap at which the substrate detected
    #: the phase's end (`rtax.substrates.poll`), summed when a phase ends after several polled
    #: events. A phase the substrate did not poll for has no entry (docs/measurement.md#resolution).
    resolution: dict[str, float] = field(default_factory=dict)
    #: Rate-limit waits in this environment's calls, in order (none: never rate limited).
    rate_limit_waits: list[RateLimitWait] = field(default_factory=list)
    #: Set by a warm pool when it hands the environment over (`Claims.claim`): how the pool made
    #: it (its own create, orchestration and ready times: a cold start, taken before the
    #: rollout) and how the claim went. The run keeps it in its provenance (``pool``).
    pool: dict[str, Any] | None = None

    def mark(self, name: str) -> None:
        """Record a native milestone now; it explains phases, it never replaces them."""
        self.milestones.append(Milestone(name, clock()))

    def resolved(self, phase: str, resolution_s: float) -> None:
        """Add a polled detection's resolution to `phase` (several may end one phase)."""
        self.resolution[phase] = self.resolution.get(phase, 0.0) + resolution_s


@dataclass
class Leftover(Environment):
    """An environment that carries the rtax label and still exists, found by that label.

    It is an `Environment` (with no handle) so that removing one is `destroy`, the same path
    as a rollout's own cleanup. `owner` is "host/pid-namespace:pid" (`kit.owner`) of the
    process that created it, so that
    the reaper can tell a crashed run's orphan from an environment that a live run still uses;
    `expires_at` (UTC, ISO) is when no rollout can be using it any more, whoever its owner
    (None: made before environments carried an expiry, or outside a rollout). `frozen`: it was
    listed paused (a resume pool's, whose owner is gone), so its kind thaws it before removing
    it: a frozen gVisor sandbox can't be killed, and a forced removal tried first can leave it
    a zombie that is no longer paused to thaw.
    """

    created_at: str | None = None
    owner: str | None = None
    detail: str = ""
    expires_at: str | None = None
    frozen: bool = False


def redacting(method: Callable[..., Any]) -> Callable[..., Any]:
    """Decorate a substrate method so that any exception leaves it with every secret the
    substrate holds (its ``_secrets()``) and every one rtax holds (`rtax.core.redaction`) replaced
    by ``***``: in its message, its attributes and every exception chained to it.

    Why at the boundary: an error's text is what reaches the run row, the logs and the CSVs,
    and it is often written by the far side (an API that echoes a bad token back in its
    refusal, kept in an `ApiException`'s body, printed again as the cause of ours by
    ``log.exception``); scrubbing where the exception leaves the substrate covers every path
    at once. The secrets are registered too, so that log records are scrubbed of them."""

    @functools.wraps(method)
    def wrapper(self: Any, *args: Any, **kwargs: Any) -> Any:
        try:
            return method(self, *args, **kwargs)
        except Exception as exc:
            secrets = [s for s in self._secrets() if s]
            redaction.register(*secrets)
            redaction.scrub_exception(exc, secrets)
            raise

    return wrapper


def redact(text: str, secrets: list[str]) -> str:
    """`text` with every one of `secrets` replaced by ``***``."""
    for secret in secrets:
        text = text.replace(secret, "***")
    return text


@runtime_checkable
class Substrate(Protocol):
    """What the probe runner, the scheduler and the reaper need from a substrate; nothing else
    is ever called (README.md#substrates)."""

    #: the configured name (e.g. "docker-gvisor"); several names may share one kind
    name: str
    #: the registry key of the implementation (e.g. "docker")
    kind: str
    #: "real", "emulated" or "modelled"
    fidelity: str
    #: how actions reach the environment: "exec" (one call per action) or "session"
    mode: str
    #: where an environment reaches this host (T2's git server listens there); None when
    #: only the user can say and has not (`require_host_address`)
    host_address: str | None

    def prepare(self, log: Callable[[str], None]) -> None:
        """Make sure the substrate can run rollouts (e.g. build a missing image); idempotent."""
        ...

    def create(self, run_id: str, *, lifetime_s: float | None = None) -> Environment:
        """Ask for a new environment labelled with `LABEL` and `run_id`; return once accepted.
        `lifetime_s`: how long the rollout may use it (its deadline and cleanup), written into
        its labels as an expiry (`kit.labels`). Any failure after the request was sent must end
        with nothing made, or with the environment removed, or leave it labelled for the
        reaper (docs/adding-a-substrate.md#leftovers)."""
        ...

    def wait_running(self, env: Environment, timeout_s: float) -> None:
        """Return once the substrate reports the environment running."""
        ...

    def run(self, env: Environment, command: str, timeout_s: float) -> CommandResult:
        """Run one shell command; on timeout kill it and raise `CommandTimeout`."""
        ...

    def destroy(self, env: Environment, timeout_s: float) -> None:
        """Delete the environment, one this substrate made or a `Leftover` it found, and verify
        that it is gone, else raise `CleanupFailed`."""
        ...

    def leftovers(self) -> list[Leftover]:
        """Every environment of this substrate name that carries the rtax label."""
        ...

    def describe(self) -> dict[str, Any]:
        """Provenance: endpoint, image, runtime, parameters, client library versions."""
        ...

    def close(self) -> None:
        """Release clients and connections; the substrate is not used afterwards."""
        ...


@runtime_checkable
class Claims(Protocol):
    """A substrate that hands over environments launched another way than a cold create
    (docs/measurement.md#launch-paths): a warm pool's running ones (`rtax.substrates.pool`),
    fresh ones restored from a snapshot (`rtax.substrates.restore`), paused ones resumed."""

    #: ``warm``, ``restore`` or ``resume``: the series, and the phase the handover is timed in
    #: (`rtax.core.record.LAUNCH_PHASE`)
    launch_type: str

    def claim(self, run_id: str, *, lifetime_s: float, timeout_s: float) -> Environment:
        """An environment running (for a warm pool: made and ready before), for the rollout
        `run_id`, whose labels keep it from expiring for at least `lifetime_s`; `ClaimTimeout`
        when none could be handed over within `timeout_s`. The rollout then runs its first
        `READY_COMMAND` as every rollout does, and destroys it afterwards (`destroy`): a used
        environment is never returned."""
        ...

    def setup_of(self, env: Environment, setup: tuple[Action, ...]) -> tuple[Action, ...]:
        """The set-up the handed-over `env` still needs, of the workload's `setup`: all of
        it, or (a restore) only the state check, the snapshot holding the rest."""
        ...


@runtime_checkable
class PreparesLaunch(Protocol):
    """A launch path that readies something per workload before a rollout's clock starts (the
    restore path's snapshot of the tier)."""

    def prepare_for(self, workload: Workload, run_id: str) -> dict[str, Any]:
        """Ready the launch of the rollout `run_id` of `workload`; what its provenance keeps.
        Raises a `SubstrateError` (e.g. `NotSupported`) when it can't."""
        ...


@runtime_checkable
class Snapshots(Protocol):
    """A kind whose environments can be snapshotted and restored (docs/measurement.md#launch-paths):
    the restore path (`rtax.substrates.restore`) calls these.

    What a snapshot keeps differs by kind, and the state check must not claim more than it
    keeps: a checkpoint (Docker's CRIU or runsc) keeps the files and the processes' memory, a
    filesystem snapshot (Daytona's ``create_snapshot``) the files alone. A kind whose snapshots
    keep no memory says so with a class attribute ``snapshot_keeps_memory = False``; one that
    says nothing keeps both (`snapshot_keeps_memory`). It is not a member of this protocol, so
    that every kind that snapshots need not repeat the default."""

    def snapshot_support(self, needs_network: bool) -> str | None:
        """Why a workload whose set-up reaches the network (or one whose doesn't) can't be
        snapshotted here; None: it can."""
        ...

    def snapshot_source(self, run_id: str, *, token: str, lifetime_s: float) -> Environment:
        """A cold, running environment whose first process holds `token` in memory
        (`rtax.substrates.state.holder_command`), to be set up and snapshotted. A kind whose
        snapshots keep no memory may ignore `token`: nothing will ask for it."""
        ...

    def snapshot(self, env: Environment, into: str) -> dict[str, Any]:
        """Snapshot `env` (its files, and its processes' memory where the kind keeps it)
        under the folder `into` (a kind whose snapshots live in a service names them after
        it); the snapshot may stop the environment, and the caller destroys it. Returns what
        `restore` needs (and ``image``, ``size_bytes``), JSON-serialisable."""
        ...

    def restore(self, snapshot: dict[str, Any], run_id: str, *, lifetime_s: float) -> Environment:
        """A fresh environment running from `snapshot`, labelled as `create` labels; the
        request → running is the restore phase."""
        ...

    def forget(self, snapshot: dict[str, Any]) -> None:
        """Remove what `snapshot` keeps (its checkpoint files, a committed image, a
        service's snapshot)."""
        ...


@runtime_checkable
class Pauses(Protocol):
    """A kind whose running environments can be frozen and thawed (the cgroup freezer, or a
    service's pause and start of a sandbox)."""

    def pause(self, env: Environment) -> None: ...

    def unpause(self, env: Environment) -> None: ...


@runtime_checkable
class CopiesIn(Protocol):
    """A kind that can copy a folder of this host into a running environment from outside it
    (Docker's archive upload): how a snapshot source without a network gets what its set-up
    would otherwise fetch (`rtax.substrates.restore.Restorer.seed`)."""

    def copy_in(self, env: Environment, folder: Path, into: str) -> None:
        """Copy `folder` into `env` as ``into/<folder's name>``."""
        ...


@runtime_checkable
class Weighs(Protocol):
    """A kind that can say how much memory one of its environments holds: what a warm or
    paused pool keeps while idle (docs/measurement.md#launch-paths), measured by the pool
    after each environment is made and before any claim, so no claim pays for the call."""

    def memory_bytes(self, env: Environment) -> int | None:
        """The memory `env` holds now (its cgroup's usage less the page cache the kernel can
        drop, as ``docker stats`` shows it); None when the runtime doesn't say."""
        ...


def snapshot_keeps_memory(substrate: object) -> bool:
    """Whether `substrate`'s snapshots keep its processes' memory as well as its files: its
    ``snapshot_keeps_memory`` attribute, True when it has none (a checkpoint, as Docker's).

    Why True by default: the state check then asks for both halves, so a kind that forgets to
    say its snapshots lose memory fails its restores as ``restore_corrupt``, loudly, and never
    passes a check it did not make (docs/measurement.md#launch-paths)."""
    return bool(getattr(substrate, "snapshot_keeps_memory", True))


def launch_type(substrate: object) -> str:
    """How `substrate`'s rollouts get their environment: its `Claims.launch_type`, else
    ``cold``: the label that keeps the paths apart as different series."""
    return str(substrate.launch_type) if isinstance(substrate, Claims) else "cold"


def require_host_address(substrate: Substrate) -> str:
    """`substrate.host_address`, or a one-line error saying what to configure."""
    if not substrate.host_address:
        raise SubstrateError(
            f"substrate {substrate.name}: set host_address to an address of this host that its "
            "environments can reach (T2 clones from a git server there)"
        )
    return substrate.host_address
