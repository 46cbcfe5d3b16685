"""A warm pool: environments of any substrate made in advance, claimed by rollouts.

Why a wrapper and not a kind (docs/measurement.md#warm-pools): a fleet puts a pool in front of
*any* substrate to hide its cold start, so it is written once, against the protocol, around
whichever substrate a configuration entry names (docs/configuration.md#warm-pools). It makes
each environment with that substrate's own create, wait_running and first `true`
(`rtax.substrates.coldstart`), so making one *is* a cold start, kept as such (`WarmPool.made`,
and the ``pool`` provenance of the run that claims it): the samples a pool model draws from.

The rules (those the pool model, `rtax.planning.poolmodel`, simulates, so it can be checked against
this):

- It starts full: `prepare` makes `size` environments and returns once every one is ready.
- A claim takes the environment ready longest; its slot is refilled in the background by one
  of `refill_concurrency` workers: at most that many creates in flight, never more than `size`
  environments held, ready or being made. A claim that finds none ready waits, first come
  first served, for the next refill to finish.
- A claimed environment is never returned: the rollout destroys it (a used sandbox is dirty).
- Expiry labels cover `max_idle_s` from the create request plus one rollout; an environment
  older than `max_idle_s` is replaced, and no claim gets one that would expire in its rollout.
- `close` destroys everything the pool holds (what is being made, once made); what a crash
  leaves carries its labels, owner and expiry for the reaper like any other environment.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import uuid
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from rtax.core.failures import Cancelled, ClaimTimeout, NotSupported, SubstrateError
from rtax.core.workloads import Action
from rtax.settings.pool import PoolSettings
from rtax.substrates.base import Environment, Pauses, Substrate, Weighs, clock
from rtax.substrates.coldstart import cold_start
from rtax.substrates.wrapper import Wrapper

log = logging.getLogger(__name__)

#: The prefix of the run id a pooled environment is labelled with while no rollout owns it.
POOL_RUN_PREFIX = "pool-"


class _Closed(Cancelled):
    """The pool was closed while a claim waited or an environment was being made."""


@dataclass
class _Ready:
    """A ready environment waiting in the pool, on the `clock` timeline."""

    env: Environment
    made: dict[str, Any]
    created: float
    ready_at: float
    expires: float


@dataclass
class _State:
    """What the pool's lock guards."""

    ready: deque[_Ready] = field(default_factory=deque)
    #: claims waiting, first come first served
    waiters: deque[object] = field(default_factory=deque)
    #: slots to refill that no worker has started yet
    wanted: int = 0
    in_flight: int = 0
    #: environments to destroy in the background (too old to hand over)
    discard: list[Environment] = field(default_factory=list)
    started: bool = False
    closed: bool = False
    #: the last failure to make an environment (class, message), for a claim that times out
    last_failure: str | None = None
    #: failures to make an environment since the pool started
    failures: int = 0


class WarmPool(Wrapper):
    """`size` environments of `inner` kept ready (`PoolSettings`); rollouts `claim` them.

    It speaks the whole substrate protocol, each call passed to `inner` (the reaper and the
    contract suite see the wrapped substrate), plus `claim` (`rtax.substrates.base.Claims`).
    `rollout_lifetime_s`: how long a rollout may use an environment (its deadline and
    cleanup), written with `max_idle_s` into each environment's expiry. The timeouts and the
    ready interval are the probe runner's (`rtax.rollouts.rollout.RolloutOptions`), so that the pool
    makes an environment exactly as a cold rollout does."""

    def __init__(
        self,
        inner: Substrate,
        settings: PoolSettings,
        *,
        rollout_lifetime_s: float,
        running_timeout_s: float = 300.0,
        ready_timeout_s: float = 120.0,
        ready_interval_s: float = 0.02,
        cleanup_timeout_s: float = 120.0,
        retry_pause_s: float = 1.0,
        now: Callable[[], float] = clock,
        paused: bool = False,
    ) -> None:
        if paused and not isinstance(inner, Pauses):
            raise NotSupported(f"{inner.name} ({inner.kind}) can't pause its environments")
        self.inner = inner
        #: keep the environments frozen (the cgroup freezer) until claimed: the resume path
        #: (docs/measurement.md#launch-paths), whose claim thaws one
        self.paused = paused
        #: the ids of the environments frozen now (made, not yet claimed): whatever removes one,
        #: the pool or the reaper through `destroy`, thaws it first
        self._frozen: set[str] = set()
        #: the series of the rollouts that claim from it (`rtax.substrates.base.Claims`)
        self.launch_type = "resume" if paused else "warm"
        self.settings = settings
        self.rollout_lifetime_s = rollout_lifetime_s
        #: what each environment's expiry label covers: waiting in the pool, then one rollout
        self.label_lifetime_s = settings.max_idle_s + rollout_lifetime_s
        self.running_timeout_s = running_timeout_s
        self.ready_timeout_s = ready_timeout_s
        self.ready_interval_s = ready_interval_s
        self.cleanup_timeout_s = cleanup_timeout_s
        self.retry_pause_s = retry_pause_s
        self.now = now
        #: every environment the pool made, in order: its cold phases (the model's samples)
        self.made: list[dict[str, Any]] = []
        self._cond = threading.Condition()
        self._state = _State()
        self._stopping = threading.Event()
        self._workers: list[threading.Thread] = []

    # -- the protocol, passed through (`Wrapper`), but for these -----------------------------

    def prepare(self, log: Callable[[str], None]) -> None:
        """Prepare the wrapped substrate, then fill the pool (`fill`): before any clock starts."""
        self.inner.prepare(log)
        self.fill(log)

    def describe(self) -> dict[str, Any]:
        return {**self.inner.describe(), "pool": self.settings.describe()}

    def destroy(self, env: Environment, timeout_s: float) -> None:
        """Remove `env`, thawing it first if the pool froze it: a forced removal of a frozen
        gVisor container fails ("Could not kill running container ... is zombie"), and on runc
        it waits out the engine's kill timeout. A claimed (thawed) one costs no extra call."""
        if env.env_id in self._frozen:
            with contextlib.suppress(Exception):  # then the removal says what is wrong
                self.inner.unpause(env)
            self._frozen.discard(env.env_id)
        self.inner.destroy(env, timeout_s)

    # -- the pool ----------------------------------------------------------------------------

    def fill(self, log: Callable[[str], None] | None = None) -> None:
        """Start the pool if needed and return once `size` environments are ready. A failure
        to make one while filling closes the pool and is raised: a pool that can't be filled
        can't stand in for the substrate's cold start."""
        with self._cond:
            if self._state.closed:
                raise _Closed(f"warm pool of {self.name} is closed")
            if log is not None and len(self._state.ready) < self.settings.size:
                log(f"warm pool: making {self.settings.size} environments of {self.name}")
            failures = self._state.failures
            self._start_locked()
            while len(self._state.ready) < self.settings.size and not self._state.closed:
                if self._state.failures > failures:
                    why = self._state.last_failure
                    break
                self._cond.wait()
            else:
                why = None if not self._state.closed else "it was closed"
        if why is not None:
            self.close_pool()
            raise SubstrateError(f"warm pool of {self.name} could not be filled: {why}")

    def claim(self, run_id: str, *, lifetime_s: float, timeout_s: float) -> Environment:
        """The environment ready longest, handed over to the rollout `run_id` (see the
        module docstring); `ClaimTimeout` if none came within `timeout_s`. A pool that was
        never prepared starts filling now (this claim then waits for a cold start)."""
        if lifetime_s > self.label_lifetime_s:
            raise SubstrateError(
                f"warm pool of {self.name} makes environments for rollouts of at most "
                f"{self.rollout_lifetime_s:g} s; this one may last {lifetime_s:g} s"
            )
        asked = self.now()
        deadline = asked + timeout_s
        ticket = object()
        with self._cond:
            state = self._state
            if state.closed:
                raise _Closed(f"warm pool of {self.name} is closed")
            self._start_locked()
            found_ready, in_flight = len(state.ready), state.in_flight
            state.waiters.append(ticket)
            try:
                while True:
                    if state.closed:
                        raise _Closed(f"warm pool of {self.name} closed during a claim")
                    entry = self._take_locked(lifetime_s) if state.waiters[0] is ticket else None
                    if entry is not None:
                        break
                    left = deadline - self.now()
                    if left <= 0:
                        raise ClaimTimeout(
                            f"warm pool of {self.name}: no environment within {timeout_s:g} s "
                            f"({state.in_flight} being made; last failure: "
                            f"{state.last_failure or 'none'})"
                        )
                    self._cond.wait(left)
            finally:
                state.waiters.remove(ticket)
                self._cond.notify_all()  # the next waiter may be first now
            state.wanted += 1  # the slot it leaves is refilled
            self._cond.notify_all()
        env = entry.env
        if self.paused:
            try:
                self.inner.unpause(env)  # the resume: its processes run again
                self._frozen.discard(env.env_id)
            except BaseException:
                self._remove(env)
                raise
        handed = self.now()
        env.run_id = run_id
        env.pool = {
            **entry.made,
            "idle_s": max(asked - entry.ready_at, 0.0),  # 0: it was made for this claim
            "waited_s": handed - asked,
            "found_ready": found_ready,
            "refills_in_flight": in_flight,
            "settings": self.settings.describe(),
        }
        return env

    def setup_of(self, env: Environment, setup: tuple[Action, ...]) -> tuple[Action, ...]:
        """A pooled environment was made as a cold one is: it needs the whole set-up."""
        return setup

    def close_pool(self) -> None:
        """Stop refilling and destroy every environment the pool holds; those being made are
        destroyed by their worker as soon as they are made. Idempotent."""
        with self._cond:
            if self._state.closed:
                return
            self._state.closed = True
            self._stopping.set()
            doomed = [r.env for r in self._state.ready] + self._state.discard
            self._state.ready.clear()
            self._state.discard = []
            self._cond.notify_all()
        threads = [
            threading.Thread(target=self._remove, args=(env,), daemon=True) for env in doomed
        ]
        for thread in threads:
            thread.start()
        bound = self.running_timeout_s + self.ready_timeout_s + self.cleanup_timeout_s
        for thread in [*threads, *self._workers]:
            thread.join(bound)  # bounded by the calls' own timeouts; never for ever

    def close(self) -> None:
        """`close_pool`, then release the wrapped substrate."""
        try:
            self.close_pool()
        finally:
            self.inner.close()

    def counts(self) -> dict[str, int]:
        """What the pool holds now: ready, being made, claims waiting, failures so far."""
        with self._cond:
            s = self._state
            return {
                "ready": len(s.ready),
                "in_flight": s.in_flight,
                "waiting": len(s.waiters),
                "failures": s.failures,
                "made": len(self.made),
            }

    # -- inside the lock ---------------------------------------------------------------------

    def _start_locked(self) -> None:
        if self._state.started:
            return
        self._state.started = True
        self._state.wanted = self.settings.size
        for i in range(self.settings.refill_concurrency):
            worker = threading.Thread(target=self._work, name=f"pool-{self.name}-{i}", daemon=True)
            self._workers.append(worker)
            worker.start()

    def _take_locked(self, lifetime_s: float) -> _Ready | None:
        """The oldest ready environment whose expiry covers `lifetime_s` more; those that
        don't are discarded (destroyed in the background, their slots refilled)."""
        now = self.now()
        while self._state.ready:
            entry = self._state.ready.popleft()
            if entry.expires - now >= lifetime_s:
                return entry
            self._discard_locked(entry)
        return None

    def _discard_locked(self, entry: _Ready) -> None:
        self._state.discard.append(entry.env)
        self._state.wanted += 1
        self._cond.notify_all()

    def _recycle_locked(self) -> float | None:
        """Discard environments older than `max_idle_s` (from their create request); return
        how long until the next one is (None: none waiting)."""
        now, limit = self.now(), self.settings.max_idle_s
        for entry in [e for e in self._state.ready if now - e.created > limit]:
            self._state.ready.remove(entry)
            self._discard_locked(entry)
        if not self._state.ready:
            return None
        return max(min(e.created for e in self._state.ready) + limit - now, 0.001)

    # -- the workers -------------------------------------------------------------------------

    def _work(self) -> None:
        """One refill worker: destroy what was discarded, else make an environment for a slot
        that wants one, until the pool closes."""
        state = self._state
        while True:
            with self._cond:
                while True:
                    if state.closed:
                        return
                    next_stale = self._recycle_locked()
                    if state.discard or state.wanted:
                        break
                    self._cond.wait(next_stale)
                doomed = state.discard.pop() if state.discard else None
                if doomed is None:
                    state.wanted -= 1
                    state.in_flight += 1
            if doomed is not None:
                self._remove(doomed)  # outside the lock: a removal takes the engine's time
                continue
            try:
                entry = self._make()
            except Exception as exc:
                with self._cond:
                    state.in_flight -= 1
                    state.wanted += 1  # the slot still wants one
                    state.failures += 1
                    state.last_failure = f"{type(exc).__name__}: {exc}"[:500]
                    self._cond.notify_all()
                if not isinstance(exc, _Closed):
                    log.warning("warm pool of %s: %s", self.name, state.last_failure)
                self._stopping.wait(self.retry_pause_s)  # a failing substrate is not hammered
                continue
            with self._cond:
                state.in_flight -= 1
                closed = state.closed
                if not closed:
                    state.ready.append(entry)
                    self._cond.notify_all()
            if closed:
                self._remove(entry.env)

    def _make(self) -> _Ready:
        """One environment made as a cold rollout makes it (`coldstart.cold_start`), and the
        worker's whole turn for it as ``refill_s`` (the cold start, a pause and the weighing
        after it): what a claim waiting on an empty pool waits for, one turn per refill."""
        began = self.now()
        made = cold_start(
            self.inner,
            f"{POOL_RUN_PREFIX}{uuid.uuid4().hex[:16]}",
            lifetime_s=self.label_lifetime_s,
            running_timeout_s=self.running_timeout_s,
            ready_timeout_s=self.ready_timeout_s,
            ready_interval_s=self.ready_interval_s,
            remove=self._remove,
            now=self.now,
            pause=self._pause,
        )
        if self.paused:
            try:
                self.inner.pause(made.env)
                self._frozen.add(made.env.env_id)
            except BaseException:
                self._remove(made.env)
                raise
        made.made["memory_bytes"] = self._weigh(made.env)
        made.made["refill_s"] = self.now() - began
        with self._cond:
            self.made.append(made.made)
        expires = made.started + self.label_lifetime_s
        return _Ready(made.env, made.made, made.started, made.ready_at, expires)

    def _weigh(self, env: Environment) -> int | None:
        """What `env` holds while it waits (paused, if the pool pauses): measured once it is
        made, by the worker that made it, so no claim waits for the call; None when the kind
        can't say (not `Weighs`) or the call failed (logged: a pool is not refused for it)."""
        if not isinstance(self.inner, Weighs):
            return None
        try:
            return self.inner.memory_bytes(env)
        except Exception as exc:
            log.warning("warm pool of %s: memory of %s: %s", self.name, env.env_id, exc)
            return None

    def _pause(self, seconds: float) -> None:
        if self._stopping.wait(seconds):
            raise _Closed(f"warm pool of {self.name} closed while making an environment")

    def _remove(self, env: Environment) -> None:
        """Destroy one of the pool's environments; a failure is logged (its labels let the
        reaper remove it later), never raised: the pool's own clean-up is no rollout's."""
        try:
            self.destroy(env, self.cleanup_timeout_s)
        except Exception as exc:
            log.warning("warm pool of %s: could not destroy %s: %s", self.name, env.env_id, exc)
