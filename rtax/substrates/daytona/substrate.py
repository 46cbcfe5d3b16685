"""The `DaytonaSubstrate` class: the protocol's eight methods on Daytona's API, and the launch
paths' calls (`rtax.substrates.base.Snapshots`, `Pauses`, `Weighs`) on the SDK's own
``create_snapshot``, ``pause``, ``start`` and ``get_metrics_latest``.

Why it reaches past the SDK's front door: ``Daytona.create`` would also wait for the start and
fold orchestration into create, so create is the generated client's ``create_sandbox`` and the
start wait is the SDK's own ``Sandbox.wait_for_sandbox_start`` (woken by its socket.io event).
Those internals (``Daytona._sandbox_api`` and friends) are pinned by the SDK version that
`describe` records. Everything not specific to Daytona (labels, leftovers, rate limits, polling,
command timeouts) comes from `rtax.substrates.kit`; the reasons behind each phase and failure
class are in docs/substrates/daytona.md.

Why its snapshots keep no memory (``snapshot_keeps_memory = False``): Daytona's
``create_snapshot`` captures the sandbox's file system (its API: "Container sandboxes do not
support memory snapshots"), and a sandbox created from it starts its processes afresh. The
restore path then checks the file half of its state alone, and says so in the provenance
(docs/substrates/daytona.md#launch-paths).

Why every message is scrubbed twice: the API key must not reach a run row even when the far
side echoes it, so reasons are scrubbed as they are built and again, by `redacting`, where an
error leaves the substrate.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from rtax.core import redaction
from rtax.core.failures import (
    CleanupFailed,
    CommandTimeout,
    CreateFailed,
    CreateTimeout,
    EnvironmentLost,
    ExecError,
    RateLimited,
    ReadyTimeout,
    SubstrateError,
)
from rtax.substrates import kit
from rtax.substrates.base import (
    FIDELITIES,
    CommandResult,
    Environment,
    Leftover,
    RateLimitWait,
    clock,
    redact,
    redacting,
)
from rtax.substrates.daytona import actions
from rtax.substrates.daytona.client import (
    DEAD_STATES,
    Shared,
    acquire,
    connect,
    create_request,
    explain,
    is_transport,
    labelled,
    message,
    release,
    sandbox_of,
    state,
    status,
    versions,
    why_lost,
)
from rtax.substrates.emulated import EmulationWatch

MODES = ("exec", "session")
#: Deletion is verified by polling ``GET /sandbox/{id}`` every 50 ms
#: (docs/measurement.md#resolution). Daytona's documented limit for authenticated reads such as this
#: is tens of thousands of requests a minute (tier-dependent), so 20 a second per rollout in cleanup
#: is well inside it, and a 50 ms resolution is small beside a deletion.
POLL_INTERVAL_S = 0.05
DEFAULT_API_URL = "https://app.daytona.io/api"


class DaytonaSubstrate:
    """Sandboxes from `snapshot` (or `image`), one per rollout, on Daytona."""

    kind = "daytona"

    def __init__(
        self,
        name: str = "daytona",
        fidelity: str = "real",
        api_url: str | None = None,
        target: str | None = None,
        snapshot: str | None = "rtax-runner",
        image: str | None = None,
        cpu: int | None = None,
        memory_gib: int | None = None,
        disk_gib: int | None = None,
        mode: str = "exec",
        workdir: str = "/work",
        auto_stop_interval_min: int = 15,
        auto_delete_interval_min: int | None = 0,
        host_address: str | None = None,
        api_timeout_s: float = 60.0,
        create_timeout_s: float = 120.0,
        rate_limit_attempts: int = 6,
        rate_limit_base_s: float = 0.5,
        rate_limit_max_s: float = 10.0,
        rate_limit_deadline_s: float = 60.0,
        api_key: str | None = None,
    ) -> None:
        if mode not in MODES:
            raise ValueError(f"mode must be one of {', '.join(MODES)}, got {mode!r}")
        if fidelity not in FIDELITIES:
            raise ValueError(f"fidelity must be one of {', '.join(FIDELITIES)}, got {fidelity!r}")
        if auto_stop_interval_min <= 0:
            raise ValueError("auto_stop_interval_min must be > 0 so that a leaked sandbox stops")
        self.name = name
        self._fidelity = fidelity
        #: an rtax emulation's answer makes the samples `emulated`, whatever was configured
        #: (the client's watch once there is a client: shared by all its users)
        self.emulation = EmulationWatch()
        self.api_url = api_url or os.environ.get("DAYTONA_API_URL") or DEFAULT_API_URL
        self.target = target or os.environ.get("DAYTONA_TARGET")
        #: the snapshot cold sandboxes start from (an image replaces it); not ``snapshot``,
        #: which is the restore path's call (`rtax.substrates.base.Snapshots.snapshot`)
        self.base_snapshot = None if image else snapshot
        self.image = image
        self.cpu, self.memory_gib, self.disk_gib = cpu, memory_gib, disk_gib
        self.mode = mode
        self.workdir = workdir
        self.auto_stop_interval_min = auto_stop_interval_min
        self.auto_delete_interval_min = auto_delete_interval_min
        #: where a sandbox reaches this host: it runs elsewhere, so only the user knows
        self.host_address = host_address
        self.api_timeout_s = api_timeout_s
        self.create_timeout_s = create_timeout_s
        self.retry = kit.RetryPolicy(
            attempts=rate_limit_attempts,
            base_s=rate_limit_base_s,
            max_s=rate_limit_max_s,
            deadline_s=rate_limit_deadline_s,
        )
        self._api_key = api_key
        self._shared: Shared | None = None
        self._streams = actions.Streams()

    @property
    def fidelity(self) -> str:
        return self.emulation.fidelity(self._fidelity)

    # -- the SDK client ---------------------------------------------------------------------

    def _key(self) -> str:
        key = self._api_key or os.environ.get("DAYTONA_API_KEY")
        if not key:
            raise SubstrateError(
                "no Daytona API key: set DAYTONA_API_KEY, or api_key_env in rtax.toml"
            )
        redaction.register(key)  # kept out of every log record too
        return key

    def client(self) -> Any:
        """The SDK's `Daytona` client this substrate shares (`client.acquire`), taken on
        first use."""
        if self._shared is None:
            self._shared = acquire(self.api_url, self.target, self._key())
            self.emulation = self._shared.watch  # the endpoint's answers are the client's
        else:
            connect(self._shared.sdk)
        return self._shared.sdk

    def close(self) -> None:
        """Let go of the shared client (the last user closes its event connection)."""
        shared, self._shared = self._shared, None
        if shared is not None:
            release(shared)

    def _secrets(self) -> list[str]:
        """What `redacting` keeps out of every error leaving this substrate: the API key."""
        key = self._api_key or os.environ.get("DAYTONA_API_KEY")
        return [key] if key else []

    def _scrub(self, text: str) -> str:
        return redact(text, self._secrets())

    def _error(self, cls: type[SubstrateError], what: str, exc: BaseException) -> SubstrateError:
        return cls(self._scrub(f"{what}: {explain(exc)}")[:1000])

    def _call(
        self,
        what: str,
        fn: Callable[[], Any],
        *,
        within_s: float | None = None,
        waits: list[RateLimitWait] | None = None,
    ) -> Any:
        """`fn()`, HTTP 429 retried under `retry` (for at most `within_s` when given), each
        wait added to `waits` (an environment's `rate_limit_waits`)."""
        return self.retry.call(
            fn,
            what=what,
            limited=lambda exc: status(exc) == 429,
            detail=lambda exc: self._scrub(explain(exc))[:300],
            deadline=None if within_s is None else clock() + within_s,
            on_wait=None if waits is None else waits.append,
        )

    # -- life of one environment ------------------------------------------------------------

    @redacting
    def create(self, run_id: str, *, lifetime_s: float | None = None) -> Environment:
        return self._create(run_id, lifetime_s, snapshot=self.base_snapshot, image=self.image)

    def _create(
        self, run_id: str, lifetime_s: float | None, *, snapshot: str | None, image: str | None
    ) -> Environment:
        """``POST /sandbox`` from `snapshot` (the configured one, or one the restore path
        made) or `image`, answered: the create phase."""
        client = self.client()
        name = f"rtax-{run_id}"
        body = create_request(
            name,
            kit.labels(run_id, self.name, lifetime_s),
            target=self.target,
            snapshot=snapshot,
            image=image,
            resources=(self.cpu, self.memory_gib, self.disk_gib),
            auto_stop_min=self.auto_stop_interval_min,
            auto_delete_min=self.auto_delete_interval_min,
        )
        api = client._sandbox_api
        waits: list[RateLimitWait] = []
        try:
            dto = self._call(
                "create sandbox",
                lambda: api.create_sandbox(body, _request_timeout=self.create_timeout_s),
                waits=waits,
            )
        except BaseException as exc:
            # The API may have made it before the answer was lost or turned into an error (a
            # timeout, a 500 after the write, Ctrl-C): delete it by name. One that can't be
            # deleted now keeps its labels, expiry included, for the reaper, and stops by
            # itself after `auto_stop_interval_min`. A 4xx refused it (and a 409 names a
            # sandbox that is not this request's): nothing to delete.
            if not 400 <= (status(exc) or 500) < 500:
                with contextlib.suppress(Exception):
                    api.delete_sandbox(name, _request_timeout=min(self.api_timeout_s, 30))
            if isinstance(exc, SubstrateError) or not isinstance(exc, Exception):
                raise
            if is_transport(exc):
                raise self._error(CreateTimeout, "create sandbox", exc) from exc
            raise self._error(CreateFailed, "create sandbox refused", exc) from exc
        sandbox = sandbox_of(client, dto)
        env = Environment(env_id=dto.id, run_id=run_id, handle={"sandbox": sandbox, "name": name})
        env.rate_limit_waits.extend(waits)
        env.mark("created")
        return env

    @redacting
    def wait_running(self, env: Environment, timeout_s: float) -> None:
        from daytona._utils.timeout import _TimeoutMarker
        from daytona.common.errors import DaytonaTimeoutError

        sandbox = env.handle["sandbox"]
        deadline = clock() + timeout_s
        try:
            self._call(
                "wait for start",
                lambda: sandbox.wait_for_sandbox_start(timeout=max(deadline - clock(), 0.001)),
                within_s=timeout_s,
                waits=env.rate_limit_waits,
            )
        except SubstrateError:
            raise
        except (DaytonaTimeoutError, _TimeoutMarker) as exc:
            # Off the main thread the SDK times out by raising _TimeoutMarker into this thread
            # (PyThreadState_SetAsyncExc); if the start lands just as the timer fires, the raw
            # marker (a BaseException) can escape the SDK's own conversion.
            raise ReadyTimeout(f"sandbox not started after {timeout_s:g} s") from exc
        except Exception as exc:
            if status(exc) == 404:
                raise EnvironmentLost(f"sandbox {env.env_id} vanished at start") from exc
            now = state(sandbox)
            if now in DEAD_STATES:
                reason = sandbox.error_reason or "no reason given"
                raise EnvironmentLost(
                    self._scrub(f"sandbox entered state {now} at start: {reason}")
                ) from exc
            raise self._error(EnvironmentLost, "waiting for start", exc) from exc
        env.mark("started")

    @redacting
    def run(self, env: Environment, command: str, timeout_s: float) -> CommandResult:
        def call(what: str, fn: Callable[[], Any], within_s: float) -> Any:
            within = max(self.retry.deadline_s, within_s)
            return self._call(what, fn, within_s=within, waits=env.rate_limit_waits)

        try:
            if self.mode == "session":
                session_id = actions.open_session(env, call, timeout_s)
                result = actions.run_session(
                    env, session_id, command, timeout_s, workdir=self.workdir, call=call
                )
            else:
                result = actions.run_exec(
                    env, command, timeout_s, workdir=self.workdir, streams=self._streams, call=call
                )
        except SubstrateError:
            raise
        except Exception as exc:
            raise self._action_error(env, exc, timeout_s) from exc
        return kit.first_command(env, result)

    def _action_error(self, env: Environment, exc: BaseException, timeout_s: float) -> Exception:
        """A failed toolbox call: a timeout, a sandbox that broke or went away, or else."""
        from daytona.common.errors import DaytonaTimeoutError

        if isinstance(exc, DaytonaTimeoutError) or status(exc) == 408:
            return CommandTimeout(
                self._scrub(f"no answer within {timeout_s:.3g} s (+ backstop): {message(exc)}")
            )
        lost = why_lost(self.client()._sandbox_api, env.env_id, self.api_timeout_s)
        if lost is not None:
            return EnvironmentLost(self._scrub(lost))
        return self._error(ExecError, "toolbox", exc)

    @redacting
    def destroy(self, env: Environment, timeout_s: float) -> None:
        api = self.client()._sandbox_api
        sandbox = env.handle.get("sandbox") if isinstance(env.handle, dict) else None
        deadline = clock() + timeout_s
        try:
            self._call(
                "delete sandbox",
                lambda: api.delete_sandbox(env.env_id, _request_timeout=timeout_s),
                within_s=timeout_s,
                waits=env.rate_limit_waits,
            )
        except RateLimited as exc:
            raise CleanupFailed(str(exc)) from exc
        except Exception as exc:
            if status(exc) != 404:
                raise self._error(CleanupFailed, f"delete {env.env_id}", exc) from exc
        finally:
            if sandbox is not None:
                sandbox._unsubscribe_from_events()  # the SDK's own delete does this

        def gone() -> bool | None:
            # deletion is asynchronous: poll, bounded by the deadline
            try:
                dto = api.get_sandbox(env.env_id, _request_timeout=max(deadline - clock(), 1.0))
            except Exception as exc:
                if status(exc) == 404:
                    return True
                if status(exc) != 429:  # a throttled poll is just the next poll
                    raise self._error(
                        CleanupFailed, f"verify deletion of {env.env_id}", exc
                    ) from exc
                return None
            return True if state(dto) == "destroyed" else None

        kit.confirm_removed(
            env,
            gone,
            interval_s=POLL_INTERVAL_S,
            deadline=deadline,
            still_there=lambda: CleanupFailed(
                f"sandbox {env.env_id} still exists {timeout_s:g} s after delete"
            ),
        )

    @redacting
    def leftovers(self) -> list[Leftover]:
        api = self.client()._sandbox_api
        return [
            kit.leftover(
                item.id,
                item.labels or {},
                created_at=item.created_at,
                detail=f"{self.name}, {state(item)}",
                frozen=state(item) == "paused",  # a resume pool's: the API deletes it as is
            )
            for item in labelled(api, kit.selector(self.name), self._call, self.api_timeout_s)
        ]

    # -- snapshots, pauses, memory (rtax.substrates.base.Snapshots, Pauses, Weighs) ---------

    #: Daytona's snapshots are of the file system (see the module's doc): the restore path's
    #: state check asks for the file half alone (`rtax.substrates.base.snapshot_keeps_memory`)
    snapshot_keeps_memory = False

    def snapshot_support(self, needs_network: bool) -> str | None:
        """None: every tier can be snapshotted (a sandbox's files, its set-up's clone with
        them; the API refuses what the organisation can't, and the snapshot says why)."""
        return None

    @redacting
    def snapshot_source(self, run_id: str, *, token: str, lifetime_s: float) -> Environment:
        """A cold sandbox from the configured snapshot, started. `token` is not held: PID 1
        is the sandbox's own, and a filesystem snapshot would not keep it anyway."""
        env = self._create(run_id, lifetime_s, snapshot=self.base_snapshot, image=self.image)
        return self._started_or_gone(env)

    @redacting
    def snapshot(self, env: Environment, into: str) -> dict[str, Any]:
        """The SDK's ``create_snapshot`` of `env`, named after the folder `into` (unique per
        snapshot), which returns once the sandbox leaves ``snapshotting``; then the snapshot
        itself, polled until ``active`` (a failed one is ``error``, with its reason). The
        sandbox runs on; the caller destroys it."""
        from daytona._utils.timeout import _TimeoutMarker
        from daytona.common.errors import DaytonaTimeoutError

        sandbox = env.handle["sandbox"]
        name = f"rtax-{Path(into).name}"
        try:
            self._call(
                "create snapshot",
                lambda: sandbox.create_snapshot(name, timeout=self.create_timeout_s),
                within_s=self.create_timeout_s,
                waits=env.rate_limit_waits,
            )
            made = self._active_snapshot(name)
        except BaseException as exc:
            # A snapshot the API may have made (a lost answer, one that failed or never got
            # active) is deleted by name, so nothing outlives the failure; a 4xx refused it
            # (a 409 names someone else's): nothing to delete.
            if not 400 <= (status(exc) or 500) < 500:
                with contextlib.suppress(Exception):
                    self.forget({"snapshot": name})
            if isinstance(exc, SubstrateError) or not isinstance(exc, Exception | _TimeoutMarker):
                raise
            if isinstance(exc, DaytonaTimeoutError | _TimeoutMarker):
                raise CreateTimeout(
                    f"snapshot {name} not taken in {self.create_timeout_s:g} s"
                ) from exc
            raise self._error(CreateFailed, f"snapshot of {env.env_id}", exc) from exc
        size = made.size  # GiB, as Daytona's runners report it
        return {
            "snapshot": name,
            "snapshot_ref": made.id,
            "image": made.image_name or name,
            "size_bytes": None if size is None else round(size * 1024**3),
        }

    def _active_snapshot(self, name: str) -> Any:
        """The snapshot `name` once ``active`` (polled every `POLL_INTERVAL_S`); CreateFailed
        when it ends in an error state or isn't active within `create_timeout_s`."""
        service = self.client().snapshot

        def active() -> Any:
            try:
                made = self._call("get snapshot", lambda: service.get(name))
            except Exception as exc:
                raise self._error(CreateFailed, f"snapshot {name}", exc) from exc
            now = state(made)
            if now in ("error", "build_failed"):
                reason = made.error_reason or "no reason given"
                raise CreateFailed(self._scrub(f"snapshot {name} is {now}: {reason}"))
            return made if now == "active" else None

        return kit.poll(
            active,
            interval_s=POLL_INTERVAL_S,
            deadline=clock() + self.create_timeout_s,
            timeout=lambda: CreateFailed(
                f"snapshot {name} not active {self.create_timeout_s:g} s after it was taken"
            ),
        ).value

    @redacting
    def restore(self, snap: dict[str, Any], run_id: str, *, lifetime_s: float) -> Environment:
        """A new sandbox from the snapshot, until it reports ``started``: the create and the
        start wait of a cold one, from the snapshot of the tier instead of the configured one."""
        env = self._create(run_id, lifetime_s, snapshot=str(snap["snapshot"]), image=None)
        return self._started_or_gone(env)

    def _started_or_gone(self, env: Environment) -> Environment:
        """`env` once it reports ``started``; deleted if it never does (or Ctrl-C), so a
        sandbox made outside a rollout's clean-up never outlives the call."""
        try:
            self.wait_running(env, self.create_timeout_s)
        except BaseException:
            with contextlib.suppress(Exception):
                self.destroy(env, min(self.api_timeout_s, 60))
            raise
        return env

    @redacting
    def forget(self, snap: dict[str, Any]) -> None:
        """Delete the snapshot (the SDK's ``snapshot.delete``), then confirm the API no longer
        has it (404, polled); one already gone is fine."""
        service = self.client().snapshot
        name = str(snap["snapshot"])
        try:
            self._call("delete snapshot", lambda: service.delete(name))
        except Exception as exc:
            if status(exc) == 404:
                return
            raise self._error(SubstrateError, f"delete snapshot {name}", exc) from exc

        def gone() -> bool | None:
            try:
                self._call("get snapshot", lambda: service.get(name))
            except Exception as exc:
                if status(exc) == 404:
                    return True
                raise self._error(SubstrateError, f"verify deletion of {name}", exc) from exc
            return None

        kit.poll(
            gone,
            interval_s=POLL_INTERVAL_S,
            deadline=clock() + self.api_timeout_s,
            timeout=lambda: SubstrateError(
                f"snapshot {name} still there {self.api_timeout_s:g} s after delete"
            ),
        )

    @redacting
    def pause(self, env: Environment) -> None:
        """The SDK's ``pause``: it returns once the sandbox left ``pausing``; anything but
        ``paused`` then is a failure (the service freezes the sandbox's processes, its memory
        stays)."""
        sandbox = env.handle["sandbox"]
        self._freezer(env, "pause", lambda: sandbox.pause(timeout=self.create_timeout_s))
        if state(sandbox) != "paused":
            # the SDK's cached state follows events, which may arrive out of order (an older
            # `pausing` after `paused`): the API's own answer decides
            self._freezer(env, "pause", lambda: sandbox.refresh_data(self.api_timeout_s))
        if state(sandbox) != "paused":
            raise CreateFailed(f"sandbox {env.env_id} is {state(sandbox)} after pause")

    @redacting
    def unpause(self, env: Environment) -> None:
        """The SDK's ``start`` of the paused sandbox, until it reports ``started`` (its
        socket.io event): the resume phase."""
        sandbox = env.handle["sandbox"]
        self._freezer(env, "start", lambda: sandbox.start(timeout=self.create_timeout_s))

    def _freezer(self, env: Environment, what: str, call: Callable[[], Any]) -> None:
        from daytona._utils.timeout import _TimeoutMarker
        from daytona.common.errors import DaytonaTimeoutError

        sandbox = env.handle["sandbox"]
        try:
            self._call(what, call, within_s=self.create_timeout_s, waits=env.rate_limit_waits)
        except SubstrateError:
            raise
        except (DaytonaTimeoutError, _TimeoutMarker) as exc:
            raise CreateTimeout(f"{what}: not done in {self.create_timeout_s:g} s") from exc
        except Exception as exc:
            if status(exc) == 404:
                raise EnvironmentLost(f"sandbox {env.env_id} is gone") from exc
            if state(sandbox) in DEAD_STATES:
                reason = sandbox.error_reason or "no reason given"
                raise EnvironmentLost(
                    self._scrub(f"sandbox entered state {state(sandbox)} at {what}: {reason}")
                ) from exc
            raise self._error(CreateFailed, what, exc) from exc

    @redacting
    def memory_bytes(self, env: Environment) -> int | None:
        """`Weighs.memory_bytes`: the sandbox daemon's latest sample (``get_metrics_latest``,
        its memory in use). None for a paused sandbox, whose daemon is frozen with it and can't
        answer (so a resume pool's environments have no weight here), and when it says 0."""
        sandbox = env.handle["sandbox"]
        if state(sandbox) == "paused":
            return None
        try:
            sample = self._call("metrics", sandbox.get_metrics_latest, within_s=self.api_timeout_s)
        except SubstrateError:
            raise
        except Exception as exc:
            raise self._error(SubstrateError, f"metrics of {env.env_id}", exc) from exc
        return int(sample.mem_used) or None

    @redacting
    def prepare(self, log: Callable[[str], None]) -> None:
        """Check that the API answers and accepts the key (one cheap list call)."""
        api = self.client()._sandbox_api
        try:
            api.list_sandboxes(limit=1, _request_timeout=min(self.api_timeout_s, 30))
        except Exception as exc:
            code = status(exc)
            if code in (401, 403):
                raise SubstrateError(
                    f"Daytona at {self.api_url} refused the API key (HTTP {code}); "
                    "check the key (api_key_env or DAYTONA_API_KEY)"
                ) from None
            raise SubstrateError(
                self._scrub(f"Daytona API at {self.api_url} is not reachable: {message(exc)}")
            ) from None
        log(f"daytona: API at {self.api_url} answers")

    def describe(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "endpoint": self.api_url,
            "target": self.target,
            "snapshot": self.base_snapshot,
            "image": self.image,
            "cpu": self.cpu,
            "memory_gib": self.memory_gib,
            "disk_gib": self.disk_gib,
            "mode": self.mode,
            "workdir": self.workdir,
            "auto_stop_interval_min": self.auto_stop_interval_min,
            "auto_delete_interval_min": self.auto_delete_interval_min,
            "rate_limit": self.retry.describe(),
            "credentials": "api_key parameter" if self._api_key else "env DAYTONA_API_KEY",
            "fidelity": self.fidelity,
            "client": versions(),
        }
