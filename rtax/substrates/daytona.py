"""The `daytona` substrate: one Daytona sandbox per rollout, through the `daytona` SDK.

Why these choices (docs/substrates/daytona.md):

- Phases keep their one meaning (docs/measurement.md): create = ``POST /sandbox``
  answered (the SDK's generated ``create_sandbox``, *not* ``Daytona.create``, which would also
  wait for the start and fold orchestration into create); orchestration = until the sandbox
  reports ``started``, through the SDK's own ``Sandbox.wait_for_sandbox_start``, which resolves
  on the socket.io ``sandbox.state.updated`` event (its 1 s poll is only a safety net).
  This reaches into the SDK's client for its API objects (``Daytona._sandbox_api`` and
  friends), pinned by the SDK version recorded in `describe`.
- Every sandbox carries the rtax labels (``rtax``, run id, creation time, owner host:pid,
  substrate name), a non-zero ``auto_stop_interval`` and, by default, ``auto_delete_interval=0``
  (deleted as soon as it stops), so a sandbox leaked by a crash stops and deletes itself.
- Two action modes, as for Docker (`runs.mode`):
  ``exec``: ``sandbox.process.exec`` per action. Daytona's process API returns stdout and stderr
  *combined* in one ``result``; the command's stderr is therefore redirected to a file inside
  the sandbox and printed after a per-substrate random marker line, so both streams are really
  separated by the kernel, at the cost of one extra ``cat`` when the command wrote to stderr.
  ``session``: one Daytona session per sandbox (created on the first command), each action a
  synchronous ``execute_session_command``; Daytona returns separate stdout and stderr there.
- A command's timeout is enforced inside the sandbox by coreutils ``timeout`` (TERM to the
  command, KILL a second later), because the daemon's own timeout is whole seconds and sessions
  have none; the daemon's timeout (exec) and the HTTP timeout stay as backstops. Exit 124/137
  once the timeout has passed, HTTP 408, or a transport timeout -> `CommandTimeout`.
- Classification: HTTP 429 is retried with exponential backoff (honouring ``Retry-After``),
  bounded by attempts and a deadline, then `RateLimited`; create refused (400/401/403/404/409,
  a quota) -> `CreateFailed`; create not answered -> `CreateTimeout` (and the sandbox is deleted
  by name in case it was made); not started in time -> `ReadyTimeout`; a sandbox that enters
  ``error``/``build_failed`` (at start or later) or disappears -> `EnvironmentLost` with its
  ``errorReason`` (the same class Docker uses for a container that dies at start); delete then
  verify that ``GET`` answers 404 or ``destroyed``, else `CleanupFailed`.
- Credentials: `api_key` is the key's *value*, filled in by the configuration layer from
  ``api_key_env = "VAR"`` in rtax.toml (never written in the file), else the SDK's usual
  ``DAYTONA_API_KEY``; the endpoint and target come from `api_url`/`target` or
  ``DAYTONA_API_URL``/``DAYTONA_TARGET``. The key never appears in `describe`, messages or logs:
  every message is scrubbed of it, whatever produced it.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import random
import re
import secrets
import shlex
import socket
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime
from importlib import metadata
from typing import Any

from rtax.substrates.base import (
    FIDELITIES,
    LABEL,
    CleanupFailed,
    CommandResult,
    CommandTimeout,
    CreateFailed,
    CreateTimeout,
    Environment,
    EnvironmentLost,
    ExecError,
    Leftover,
    RateLimited,
    ReadyTimeout,
    SubstrateError,
    clock,
    redact,
    redacting,
)
from rtax.substrates.emulated import EmulationWatch
from rtax.substrates.poll import poll

MODES = ("exec", "session")
_TIMEOUT_EXITS = (124, 137)
_KILL_GRACE_S = 1.0
#: Deletion is verified by polling ``GET /sandbox/{id}`` every 50 ms
#: (docs/measurement.md#resolution). Daytona's documented limit for authenticated reads such as this
#: is tens of thousands of requests a minute (tier-dependent), so 20 a second per rollout in cleanup
#: is well inside it, and a 50 ms resolution is small beside a deletion.
POLL_INTERVAL_S = 0.05
#: States in which a sandbox can no longer run commands.
_DEAD_STATES = ("error", "build_failed", "destroyed", "destroying", "stopped", "stopping",
                "archived", "archiving")  # fmt: skip
_DEFAULT_API_URL = "https://app.daytona.io/api"
#: (api_url, target, key) -> [SDK client, substrates using it]; see `DaytonaSubstrate.client`.
_CLIENTS: dict[tuple[str, str | None, str], list[Any]] = {}
_CLIENTS_LOCK = threading.Lock()


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
        rate_limit_deadline_s: float = 60.0,
        backoff_s: float = 0.5,
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
        #: (shared by every substrate of the same SDK client, see `client`)
        self.emulation = EmulationWatch()
        self.api_url = api_url or os.environ.get("DAYTONA_API_URL") or _DEFAULT_API_URL
        self.target = target or os.environ.get("DAYTONA_TARGET")
        self.snapshot = None if image else snapshot  # an image replaces the snapshot
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
        self.rate_limit_attempts = rate_limit_attempts
        self.rate_limit_deadline_s = rate_limit_deadline_s
        self.backoff_s = backoff_s
        self._api_key = api_key
        self._client: Any = None
        self._client_ident: tuple[str, str | None, str] | None = None
        self._owner = f"{socket.gethostname()}:{os.getpid()}"
        self._nonce = "__rtax_" + secrets.token_hex(8)
        self._marker = re.compile(rf"\n{self._nonce} rc (\d+)\n")

    @property
    def fidelity(self) -> str:
        return self.emulation.fidelity(self._fidelity)

    # -- the SDK client, made on first use --------------------------------------------------

    def _key(self) -> str:
        key = self._api_key or os.environ.get("DAYTONA_API_KEY")
        if not key:
            raise SubstrateError(
                "no Daytona API key: set DAYTONA_API_KEY, or api_key_env in rtax.toml"
            )
        return key

    def client(self) -> Any:
        """The SDK's `Daytona` client, shared by every substrate of the same endpoint, target
        and key in this process: the scheduler makes a substrate per rollout, and a client per
        rollout would put the SDK's construction inside the timed create and open one more
        socket.io connection each time. Its event connection is (re)started here, before any
        create, so that a start event can't be missed while it connects."""
        if self._client is None:
            from daytona import Daytona, DaytonaConfig

            key = self._key()
            ident = (self.api_url, self.target, key)
            with _CLIENTS_LOCK:
                entry = _CLIENTS.get(ident)
                if entry is None:
                    config = DaytonaConfig(api_key=key, api_url=self.api_url, target=self.target)
                    sdk, watch = Daytona(config), EmulationWatch()
                    watch.watch_openapi(sdk._api_client)  # API calls
                    watch.watch_openapi(sdk._toolbox_api_client)  # commands in a sandbox
                    entry = _CLIENTS[ident] = [sdk, 0, watch]
                entry[1] += 1
            # The endpoint's answers are the client's: shared with its other users.
            self._client, self._client_ident, self.emulation = entry[0], ident, entry[2]
        dispatcher = getattr(self._client, "_event_dispatcher", None)
        if dispatcher is not None:
            dispatcher.ensure_connected()  # non-blocking; after an idle disconnect, reconnects
        return self._client

    def close(self) -> None:
        """Release the shared client; the last user closes the SDK's event connection (it
        would otherwise reconnect forever)."""
        if self._client is None:
            return
        with _CLIENTS_LOCK:
            entry = _CLIENTS.get(self._client_ident)
            last = entry is not None and entry[0] is self._client and entry[1] <= 1
            if entry is not None and entry[0] is self._client:
                entry[1] -= 1
                if last:
                    del _CLIENTS[self._client_ident]
        dispatcher = getattr(self._client, "_event_dispatcher", None)
        self._client = None
        if last and dispatcher is not None:
            # A connect still in progress races engine.io's disconnect: let it finish.
            connecting = getattr(dispatcher, "_bg_thread", None)
            if connecting is not None:
                connecting.join(timeout=10)
            with contextlib.suppress(Exception):  # best effort: closing, not measuring
                dispatcher.disconnect()

    def _secrets(self) -> list[str]:
        """What `redacting` keeps out of every error leaving this substrate: the API key."""
        key = self._api_key or os.environ.get("DAYTONA_API_KEY")
        return [key] if key else []

    def _scrub(self, text: str) -> str:
        """A message with the API key removed as it is built (`redacting` does the same again
        where errors leave the substrate; this also covers reasons kept before raising)."""
        return redact(text, self._secrets())

    def _error(self, cls: type[SubstrateError], what: str, exc: BaseException) -> SubstrateError:
        status = _status(exc)
        detail = _message(exc)
        prefix = f"{what}: HTTP {status}: " if status else f"{what}: "
        return cls(self._scrub(prefix + detail)[:1000])

    def _retry(self, what: str, call: Callable[[], Any], deadline_s: float | None = None) -> Any:
        """`call`, retried on HTTP 429 with exponential backoff (and Retry-After), bounded by
        `rate_limit_attempts` and a deadline; then `RateLimited`."""
        deadline = clock() + (deadline_s or self.rate_limit_deadline_s)
        delay = self.backoff_s
        for attempt in range(1, self.rate_limit_attempts + 1):
            try:
                return call()
            except Exception as exc:
                if _status(exc) != 429:
                    raise
                left = deadline - clock()
                if attempt == self.rate_limit_attempts or left <= 0:
                    raise RateLimited(
                        self._scrub(f"{what}: HTTP 429 after {attempt} attempts: {_message(exc)}")
                    ) from exc
                # Jitter spreads a fleet's retries; the server's Retry-After is a floor.
                wait = max(delay * (0.5 + random.random() / 2), _retry_after(exc) or 0.0)
                time.sleep(min(wait, left))  # backing off is the point: the API asked for it
                delay *= 2
        raise AssertionError("unreachable")

    # -- life of one environment ------------------------------------------------------------

    @redacting
    def create(self, run_id: str) -> Environment:
        from daytona import Image
        from daytona._sync.sandbox import Sandbox
        from daytona.common.daytona import CODE_TOOLBOX_LANGUAGE_LABEL
        from daytona_api_client import CreateBuildInfo, CreateSandbox

        client = self.client()
        labels = {
            LABEL: "1",
            f"{LABEL}.run_id": run_id,
            f"{LABEL}.created_at": datetime.now(UTC).isoformat(),
            f"{LABEL}.owner": self._owner,
            f"{LABEL}.substrate": self.name,
            CODE_TOOLBOX_LANGUAGE_LABEL: "python",
        }
        name = f"rtax-{run_id}"
        body = CreateSandbox(
            name=name,
            labels=labels,
            env={},
            target=self.target,
            snapshot=self.snapshot,
            auto_stop_interval=self.auto_stop_interval_min,
            auto_delete_interval=self.auto_delete_interval_min,
        )
        if self.image:
            body.build_info = CreateBuildInfo(
                dockerfile_content=Image.base(self.image).dockerfile()
            )
            body.cpu, body.memory, body.disk = self.cpu, self.memory_gib, self.disk_gib
        api = client._sandbox_api
        try:
            dto = self._retry(
                "create sandbox",
                lambda: api.create_sandbox(body, _request_timeout=self.create_timeout_s),
            )
        except SubstrateError:
            raise
        except Exception as exc:
            if _is_transport(exc):
                # The API may have made it before the answer was lost: delete it by name.
                self._delete_quietly(name)
                raise self._error(CreateTimeout, "create sandbox", exc) from exc
            raise self._error(CreateFailed, "create sandbox refused", exc) from exc
        sandbox = Sandbox(
            dto,
            client._toolbox_api_client,
            api,
            "python",
            subscription_manager=client._subscription_manager,
            http_client=client._http_client,
        )
        env = Environment(env_id=dto.id, run_id=run_id, handle={"sandbox": sandbox, "name": name})
        env.mark("created")
        return env

    @redacting
    def wait_running(self, env: Environment, timeout_s: float) -> None:
        from daytona._utils.timeout import _TimeoutMarker
        from daytona.common.errors import DaytonaTimeoutError

        sandbox = env.handle["sandbox"]
        deadline = clock() + timeout_s
        try:
            self._retry(
                "wait for start",
                lambda: sandbox.wait_for_sandbox_start(timeout=max(deadline - clock(), 0.001)),
                deadline_s=timeout_s,
            )
        except SubstrateError:
            raise
        except (DaytonaTimeoutError, _TimeoutMarker) as exc:
            # Off the main thread the SDK times out by raising _TimeoutMarker into this thread
            # (PyThreadState_SetAsyncExc); if the start lands just as the timer fires, the raw
            # marker (a BaseException) can escape the SDK's own conversion.
            raise ReadyTimeout(f"sandbox not started after {timeout_s:g} s") from exc
        except Exception as exc:
            if _status(exc) == 404:
                raise EnvironmentLost(f"sandbox {env.env_id} vanished at start") from exc
            state = getattr(sandbox.state, "value", sandbox.state)
            if state in _DEAD_STATES:
                reason = sandbox.error_reason or "no reason given"
                raise EnvironmentLost(
                    self._scrub(f"sandbox entered state {state} at start: {reason}")
                ) from exc
            raise self._error(EnvironmentLost, "waiting for start", exc) from exc
        env.mark("started")

    @redacting
    def run(self, env: Environment, command: str, timeout_s: float) -> CommandResult:
        if self.mode == "session":
            result = self._session_run(env, command, timeout_s)
        else:
            result = self._exec(env, command, timeout_s)
        if result.exit_code == 0 and not env.handle.get("first_command"):
            env.handle["first_command"] = True
            env.mark("first_command")
        return result

    def _timeout_wrapped(self, command: str, timeout_s: float) -> str:
        inner = f"cd {shlex.quote(self.workdir)} || exit 125\n{command}"
        limit = f"{max(timeout_s, 0.001):.3f}"
        return f"timeout -k {_KILL_GRACE_S:g} {limit} /bin/sh -c {shlex.quote(inner)}"

    def _exec(self, env: Environment, command: str, timeout_s: float) -> CommandResult:
        sandbox = env.handle["sandbox"]
        limit = f"{max(timeout_s, 0.001):.3f}"
        # Daytona's daemon splits the command on spaces outside quotes and runs it without a
        # shell; shlex quoting is understood by its splitter and by a shell alike.
        script = (
            f'e=/tmp/.rtax-stderr.$$; timeout -k {_KILL_GRACE_S:g} {limit} /bin/sh -c "$1" 2>"$e"; '
            f'rc=$?; printf "\\n%s rc %d\\n" {self._nonce} "$rc"; '
            f'[ -s "$e" ] && cat "$e"; rm -f "$e"; exit "$rc"'
        )
        wrapped = f"/bin/sh -c {shlex.quote(script)} rtax {shlex.quote(command)}"
        backstop = math.ceil(timeout_s + _KILL_GRACE_S) + 2
        t0 = clock()
        try:
            response = self._retry(
                "exec",
                lambda: sandbox.process.exec(wrapped, cwd=self.workdir, timeout=backstop),
                deadline_s=max(self.rate_limit_deadline_s, timeout_s),
            )
        except SubstrateError:
            raise
        except Exception as exc:
            raise self._action_error(env, exc, timeout_s, clock() - t0) from exc
        latency = clock() - t0
        output = response.result or ""
        code = response.exit_code
        match = self._marker.search(output)
        if code in _TIMEOUT_EXITS and latency >= timeout_s:
            raise CommandTimeout(f"killed after {timeout_s:.3g} s (exit {code})")
        if match is None or code is None:
            raise ExecError(f"exec returned exit {code} without rtax's marker: {output[-200:]!r}")
        return CommandResult(code, output[: match.start()], output[match.end() :], latency)

    def _session_run(self, env: Environment, command: str, timeout_s: float) -> CommandResult:
        from daytona.common.process import SessionExecuteRequest

        sandbox = env.handle["sandbox"]
        session_id = env.handle.get("session_id")
        if session_id is None:
            session_id = f"rtax-{secrets.token_hex(6)}"
            try:
                self._retry("create session", lambda: sandbox.process.create_session(session_id))
            except SubstrateError:
                raise
            except Exception as exc:
                raise self._action_error(env, exc, timeout_s, 0.0) from exc
            env.handle["session_id"] = session_id
            env.mark("session_opened")
        request = SessionExecuteRequest(
            command=self._timeout_wrapped(command, timeout_s), run_async=False
        )
        backstop = math.ceil(timeout_s + _KILL_GRACE_S) + 30
        t0 = clock()
        try:
            response = self._retry(
                "session exec",
                lambda: sandbox.process.execute_session_command(
                    session_id, request, timeout=backstop
                ),
                deadline_s=max(self.rate_limit_deadline_s, timeout_s),
            )
        except SubstrateError:
            raise
        except Exception as exc:
            raise self._action_error(env, exc, timeout_s, clock() - t0) from exc
        latency = clock() - t0
        code = response.exit_code
        if code in _TIMEOUT_EXITS and latency >= timeout_s:
            raise CommandTimeout(f"killed after {timeout_s:.3g} s (exit {code})")
        if code is None:
            raise ExecError("session command finished without an exit code")
        return CommandResult(code, response.stdout or "", response.stderr or "", latency)

    def _action_error(
        self, env: Environment, exc: BaseException, timeout_s: float, latency: float
    ) -> SubstrateError:
        """A failed toolbox call: a timeout, a sandbox that broke or went away, or else."""
        from daytona.common.errors import DaytonaTimeoutError

        if isinstance(exc, DaytonaTimeoutError) or _status(exc) == 408:
            return CommandTimeout(
                self._scrub(f"no answer within {timeout_s:.3g} s (+ backstop): {_message(exc)}")
            )
        lost = self._lost_reason(env)
        if lost is not None:
            return EnvironmentLost(lost)
        return self._error(ExecError, "toolbox", exc)

    def _lost_reason(self, env: Environment) -> str | None:
        """Why the sandbox can't run commands any more (asked of the API), or None."""
        api = self.client()._sandbox_api
        try:
            dto = api.get_sandbox(env.env_id, _request_timeout=self.api_timeout_s)
        except Exception as exc:
            if _status(exc) == 404:
                return f"sandbox {env.env_id} is gone"
            return None
        state = getattr(dto.state, "value", dto.state)
        if state in _DEAD_STATES:
            return self._scrub(f"sandbox is {state}: {dto.error_reason or 'no reason given'}")
        return None

    @redacting
    def destroy(self, env: Environment, timeout_s: float) -> None:
        api = self.client()._sandbox_api
        sandbox = env.handle.get("sandbox") if isinstance(env.handle, dict) else None
        deadline = clock() + timeout_s
        try:
            self._retry(
                "delete sandbox",
                lambda: api.delete_sandbox(env.env_id, _request_timeout=timeout_s),
                deadline_s=timeout_s,
            )
        except RateLimited as exc:
            raise CleanupFailed(str(exc)) from exc
        except Exception as exc:
            if _status(exc) != 404:
                raise self._error(CleanupFailed, f"delete {env.env_id}", exc) from exc
        finally:
            if sandbox is not None:
                sandbox._unsubscribe_from_events()  # the SDK's own delete does this

        def gone() -> bool | None:
            # deletion is asynchronous: poll, bounded by the deadline
            try:
                dto = api.get_sandbox(env.env_id, _request_timeout=max(deadline - clock(), 1.0))
            except Exception as exc:
                if _status(exc) == 404:
                    return True
                if _status(exc) != 429:
                    raise self._error(
                        CleanupFailed, f"verify deletion of {env.env_id}", exc
                    ) from exc
                return None
            return True if getattr(dto.state, "value", dto.state) == "destroyed" else None

        found = poll(
            gone,
            interval_s=POLL_INTERVAL_S,
            deadline=deadline,
            timeout=lambda: CleanupFailed(
                f"sandbox {env.env_id} still exists {timeout_s:g} s after delete"
            ),
        )
        env.resolved("cleanup", found.resolution_s)
        env.mark("removed")

    def _delete_quietly(self, ref: str) -> None:
        with contextlib.suppress(Exception):
            self.client()._sandbox_api.delete_sandbox(ref, _request_timeout=30)

    @redacting
    def leftovers(self) -> list[Leftover]:
        api = self.client()._sandbox_api
        wanted = json.dumps({LABEL: "1", f"{LABEL}.substrate": self.name})
        found: list[Leftover] = []
        cursor = None
        while True:
            page = self._retry(
                "list sandboxes",
                # A sandbox whose deletion errored is hidden from the list by default, and is
                # exactly the kind of leftover the reaper exists for.
                lambda c=cursor: api.list_sandboxes(
                    labels=wanted,
                    cursor=c,
                    include_errored_deleted=True,
                    _request_timeout=self.api_timeout_s,
                ),
            )
            for item in page.items:
                labels = item.labels or {}
                found.append(
                    Leftover(
                        env_id=item.id,
                        run_id=labels.get(f"{LABEL}.run_id"),
                        created_at=labels.get(f"{LABEL}.created_at") or item.created_at,
                        owner=labels.get(f"{LABEL}.owner"),
                        detail=f"{self.name}, {getattr(item.state, 'value', item.state)}",
                    )
                )
            cursor = page.next_cursor
            if not cursor:
                return found

    @redacting
    def prepare(self, log: Callable[[str], None]) -> None:
        """Check that the API answers and accepts the key (one cheap list call)."""
        api = self.client()._sandbox_api
        try:
            api.list_sandboxes(limit=1, _request_timeout=min(self.api_timeout_s, 30))
        except Exception as exc:
            status = _status(exc)
            if status in (401, 403):
                raise SubstrateError(
                    f"Daytona at {self.api_url} refused the API key (HTTP {status}); "
                    "check the key (api_key_env or DAYTONA_API_KEY)"
                ) from None
            raise SubstrateError(
                self._scrub(f"Daytona API at {self.api_url} is not reachable: {_message(exc)}")
            ) from None
        log(f"daytona: API at {self.api_url} answers")

    def describe(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "endpoint": self.api_url,
            "target": self.target,
            "snapshot": self.snapshot,
            "image": self.image,
            "cpu": self.cpu,
            "memory_gib": self.memory_gib,
            "disk_gib": self.disk_gib,
            "mode": self.mode,
            "workdir": self.workdir,
            "auto_stop_interval_min": self.auto_stop_interval_min,
            "auto_delete_interval_min": self.auto_delete_interval_min,
            "credentials": "api_key parameter" if self._api_key else "env DAYTONA_API_KEY",
            "fidelity": self.fidelity,
            "client": {
                name: _version(name)
                for name in ("daytona", "daytona_api_client", "daytona_toolbox_api_client")
            },
        }


def _version(name: str) -> str:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return "absent"


def _status(exc: BaseException) -> int | None:
    """The HTTP status of an SDK or generated-client error, if it has one."""
    for attr in ("status_code", "status"):
        value = getattr(exc, attr, None)
        if isinstance(value, int):
            return value
    cause = exc.__cause__
    return _status(cause) if cause is not None and cause is not exc else None


def _message(exc: BaseException) -> str:
    """The API's own message (from its JSON envelope) rather than a dump of headers."""
    body = getattr(exc, "body", None)
    if isinstance(body, (str, bytes)):
        with contextlib.suppress(ValueError, TypeError):
            data = json.loads(body)
            if isinstance(data, dict) and isinstance(data.get("message"), str):
                return data["message"]
    return str(exc).splitlines()[0] if str(exc) else type(exc).__name__


def _retry_after(exc: BaseException) -> float | None:
    headers = getattr(exc, "headers", None) or {}
    value = headers.get("Retry-After") or headers.get("retry-after")
    try:
        return max(float(value), 0.0) if value is not None else None
    except (TypeError, ValueError):
        return None


def _is_transport(exc: BaseException) -> bool:
    """The API did not answer (connection refused, reset, read timeout)."""
    import urllib3

    return isinstance(exc, (urllib3.exceptions.HTTPError, OSError, TimeoutError))
