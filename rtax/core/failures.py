"""Every way a rollout fails, by the class its row records: the substrate's failures, rtax's own,
and cancellation (docs/measurement.md#failures).

Why one home: the success rate a user reads depends on which failures count against the
substrate. A substrate failure lowers it; rtax's own trouble (its git daemon, its database, its
engine losing a Ray node) is kept as a row and shown apart, never counted against the substrate;
a cancelled rollout (a scheduler or batch stopping) is half a rollout and not recorded at all.
Every error class, which side it belongs to, and the constants statistics filter by are
declared here once, and the probe runner, the engines, statistics and exports import them.
"""

from __future__ import annotations

#: rtax's own failure classes: kept as rows, shown apart, never a substrate's (`OWN_ERRORS`).
HARNESS_ERROR = "harness_error"
#: the engine failed the rollout (a Ray node lost, no node for a vantage): rtax's too
ENGINE_ERROR = "engine_error"
OWN_ERRORS: tuple[str, ...] = (HARNESS_ERROR, ENGINE_ERROR)
#: the rollout was stopped by its caller: half a rollout, never recorded
CANCELLED = "cancelled"
#: the substrate could not be built or reached before the rollout started
SETUP_ERROR = "setup_error"


# -- the substrate's failures ------------------------------------------------------------------


class SubstrateError(Exception):
    """A failure of the substrate; `error_class` is what the run row records."""

    error_class = "substrate_error"
    #: The ready phase retries a failing first command until its timeout (a starting
    #: environment may refuse commands for a while); a permanent error, one no retry can change
    #: (an exec refused as forbidden), ends it at once instead.
    permanent = False


class CreateFailed(SubstrateError):
    error_class = "create_failed"


class SnapshotGone(CreateFailed):
    """The snapshot a restore asked for is gone (its image or checkpoint was removed outside
    rtax): that rollout fails as ``create_failed``, and the restore path drops the snapshot so
    that the next rollout makes a new one instead of failing the same way forever."""


class CreateTimeout(SubstrateError):
    error_class = "create_timeout"


class ReadyTimeout(SubstrateError):
    error_class = "ready_timeout"


class RateLimited(SubstrateError):
    error_class = "rate_limited"


class ExecError(SubstrateError):
    """The command could not be run at all (a non-zero exit code is not an ExecError)."""

    error_class = "exec_error"


class OutputLost(SubstrateError):
    """A command exited 0 with nothing on either stream where its action expects output: the
    substrate lost the output (Docker's exec can, moby/moby#27289, docker/docker-py#2042), the
    workload did not fail. Kept as the substrate's failure, not the workload's."""

    error_class = "output_lost"


class CommandTimeout(SubstrateError):
    """The command ran past its timeout and was killed."""

    error_class = "action_timeout"


class EnvironmentLost(SubstrateError):
    """The environment disappeared under the rollout (killed from outside, deleted, evicted)."""

    error_class = "environment_lost"


class CleanupFailed(SubstrateError):
    error_class = "cleanup_failed"


class RestoreCorrupt(SubstrateError):
    """An environment restored from a snapshot did not hold what the snapshot was taken with
    (its state check: a file and a value held in a process's memory): a restore that loses
    state is the substrate's failure, however fast it was."""

    error_class = "restore_corrupt"


class NotSupported(SubstrateError):
    """The runtime can't do what a launch path asks (a snapshot, a pause): said before any
    rollout runs, never as a slow failure."""

    error_class = "not_supported"
    permanent = True


class ClaimTimeout(SubstrateError):
    """A warm pool had no environment to hand over within the claim's timeout (it stayed empty:
    its refills were too slow, or kept failing; the message says which)."""

    error_class = "claim_timeout"


class DeadlineExceeded(SubstrateError):
    """The rollout ran past its deadline (the substrate was too slow for it)."""

    error_class = "deadline_exceeded"


class Cancelled(SubstrateError):
    """The caller asked the rollout to stop; its record is half a rollout and not to be kept."""

    error_class = CANCELLED


#: Error classes that end the ready phase at once instead of being retried: a substrate that
#: already retried a rate limit with back-off and gave up has answered for good, as has an
#: environment that is gone or a first command that hung.
READY_FINAL = ("environment_lost", "action_timeout", "rate_limited")


def ready_refusal_is_final(exc: SubstrateError) -> bool:
    """Whether a failed ready attempt ends the ready phase (else it is retried until the ready
    timeout: a starting environment may refuse commands for a while). One rule for the probe
    runner's ready phase and a warm pool's own."""
    return exc.permanent or exc.error_class in READY_FINAL


# -- the workload's, and rtax's own ------------------------------------------------------------


class WorkloadFailed(Exception):
    """A command ran but did not do what the workload needs (e.g. the T2 test did not flip)."""

    error_class = "workload_failed"


class HarnessError(Exception):
    """rtax itself failed (its git daemon, its database, its own bookkeeping), not the
    substrate: kept as a row, shown apart, never counted against the substrate's success rate
    (docs/measurement.md#failures)."""

    error_class = HARNESS_ERROR


class EngineError(Exception):
    """The engine failed the rollout (docs/ray.md#failures): rtax's own trouble."""

    error_class = ENGINE_ERROR
