"""One environment made the way a cold rollout makes it, outside any rollout, each step timed.

Why apart from the probe runner: a warm pool (`rtax.substrates.pool`) makes its environments
before any rollout asks for one, and what it keeps of each must be a cold start with the
runner's meaning (docs/measurement.md): create (request → accepted), orchestration (→ running),
ready (→ the first `true` succeeded, refused attempts retried at a fixed interval with the
runner's rule for which refusals are final). Those are the samples a pool model draws from
(docs/measurement.md#warm-pools). Unlike a rollout it keeps no action rows: the environment is
nobody's sample until it is claimed.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from rtax.core.failures import ReadyTimeout, SubstrateError, ready_refusal_is_final
from rtax.substrates.base import READY_COMMAND, CommandResult, Environment, Substrate, clock
from rtax.substrates.poll import poll


@dataclass(frozen=True)
class ColdStart:
    """A ready environment and how it was made (`made`: its phases, attempts, resolutions,
    milestones and rate-limit waits, JSON-ready), on the `clock` timeline from `started`."""

    env: Environment
    made: dict[str, Any]
    started: float
    ready_at: float


def cold_start(
    substrate: Substrate,
    run_id: str,
    *,
    lifetime_s: float,
    running_timeout_s: float,
    ready_timeout_s: float,
    ready_interval_s: float,
    remove: Callable[[Environment], None],
    now: Callable[[], float] = clock,
    pause: Callable[[float], None] = time.sleep,
) -> ColdStart:
    """Create, wait until running, retry `true` until it succeeds; `remove` what was made if a
    later step fails (then the failure is raised). The environment's milestones, resolutions
    and rate-limit waits move into `made`: whoever uses it next starts a timeline of its own."""
    created_at = datetime.now(UTC).isoformat(timespec="microseconds")
    t0 = now()
    env = substrate.create(run_id, lifetime_s=lifetime_s)
    t1 = now()
    try:
        substrate.wait_running(env, running_timeout_s)
        t2 = now()
        attempts, resolution = _ready(
            substrate, env, ready_timeout_s, ready_interval_s, now=now, pause=pause
        )
        t3 = now()
    except BaseException:
        remove(env)
        raise
    made = {
        "env_id": env.env_id,
        "pool_run_id": run_id,
        "created_at": created_at,
        "create_s": t1 - t0,
        "orchestration_s": t2 - t1,
        "ready_s": t3 - t2,
        "time_to_first_command_s": t3 - t0,
        "ready_attempts": attempts,
        "resolution": {**env.resolution, "ready": resolution},
        "milestones": [{"name": m.name, "t_s": m.t - t0} for m in env.milestones],
        "rate_limit_waits": [dataclasses.asdict(w) for w in env.rate_limit_waits],
    }
    env.milestones, env.resolution, env.rate_limit_waits = [], {}, []
    return ColdStart(env, made, t0, t3)


def _ready(
    substrate: Substrate,
    env: Environment,
    timeout_s: float,
    interval_s: float,
    *,
    now: Callable[[], float],
    pause: Callable[[float], None],
) -> tuple[int, float]:
    """The runner's ready phase without its rows: (attempts, resolution)."""
    attempts = 0
    last = ""
    deadline = now() + timeout_s

    def attempt() -> CommandResult | None:
        nonlocal attempts, last
        attempts += 1
        try:
            result = substrate.run(env, READY_COMMAND, max(min(timeout_s, deadline - now()), 1))
        except SubstrateError as exc:
            if ready_refusal_is_final(exc):
                raise
            last = str(exc)
            return None
        if result.exit_code == 0:
            return result
        last = f"exit code {result.exit_code}"
        return None

    found = poll(
        attempt,
        interval_s=interval_s,
        deadline=deadline,
        timeout=lambda: ReadyTimeout(
            f"no successful {READY_COMMAND!r} after {attempts} attempts in {timeout_s:g} s: {last}"
        ),
        now=now,
        sleep=pause,
    )
    return attempts, found.resolution_s + (found.value.resolution_s or 0.0)
