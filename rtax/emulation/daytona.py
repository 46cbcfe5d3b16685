"""A Daytona control plane, toolbox and notification gateway on loopback, backed by Docker.

Why: the `daytona` substrate must be exercised through the real `daytona` SDK over real HTTP and
a real socket.io connection, but a Daytona account can't be reached from where rtax is tested
(README.md#emulations). This emulation serves exactly what SDK 0.226 sends:

- **API** (``{base}/api``, ``Authorization: Bearer <key>``): ``POST /sandbox`` (labels,
  snapshot or buildInfo, autoStop/autoDelete intervals), ``GET /sandbox/{idOrName}``,
  ``GET /sandbox?labels=<json>`` (``{items, nextCursor}``), ``DELETE /sandbox/{idOrName}``,
  ``GET /sandbox/{id}/toolbox-proxy-url``. Errors use the API's JSON envelope
  (``{statusCode, message, error}``).
- **Notification gateway**: socket.io at ``/api/socket.io/`` (websocket transport), the token in
  the handshake's ``auth``; every connection joins its organization's room, which receives
  ``sandbox.created`` (the sandbox) and ``sandbox.state.updated``
  (``{sandbox, oldState, newState}``) on every transition. The SDK waits on these events, so
  readiness is not quantised to its 1 s safety poll.
- **Toolbox** (``toolboxProxyUrl`` = ``{base}/toolbox``, the SDK appends ``/{sandboxId}``):
  ``POST /process/execute`` as the daemon does it (the command split by the daemon's own
  quote-aware splitter, run without a shell, stdout and stderr combined into ``result``, killed
  at ``timeout`` seconds with HTTP 408); sessions: create, get, list, delete, ``exec`` (sync and
  ``runAsync``), command status and command logs with separate stdout and stderr.

Every sandbox is a real container of the runner image made by a `DockerSubstrate` named
``daytona-emulation``; states move creating -> started (after the container runs) and
destroying -> destroyed (after it is removed), with an event on each transition.

Faults are injected by Python calls: `inject` (any HTTP status on a route, e.g. 403 quota or
429 throttling, for the next N requests), `fail_next_start` (the next sandbox goes to ``error``
with an ``errorReason``) and `set_error` (a running sandbox breaks). `start_delay_s` models
provisioning time. Recorded for tests: `requests` and `events`.

Not modelled: auto-stop/auto-archive/auto-delete timers (the intervals are stored and returned,
never enforced), quotas and regions (``target`` is echoed), snapshots other than the configured
map, image builds (a ``buildInfo`` whose Dockerfile is a bare ``FROM <local image>`` is accepted),
file system, git, PTY and preview APIs, the daemon's 50 ms exit-code polling in sessions, and
organizations beyond one. Session commands run in a subshell of one persistent bash
(`rtax.substrates.docker_session`), so ``cd`` does not carry over as it would in Daytona's.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import secrets
import shlex
import socket
import threading
import uuid
from collections import deque
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from rtax.emulation import LoopbackServer, identified
from rtax.image import RUNNER_IMAGE
from rtax.substrates.base import CommandTimeout, Environment, SubstrateError, clock

#: The organization every emulated sandbox belongs to (the socket.io room events go to).
ORGANIZATION_ID = "rtax-emulated-organization"
#: Snapshot name -> local image, the default map (the substrate's default snapshot).
DEFAULT_SNAPSHOTS = {"rtax-runner": RUNNER_IMAGE}
#: The daemon runs process.execute without a timeout when none is given; the emulation bounds it.
_NO_TIMEOUT_S = 3600.0
_REASONS = {400: "Bad Request", 401: "Unauthorized", 403: "Forbidden", 404: "Not Found",
            408: "Request Timeout", 409: "Conflict", 429: "Too Many Requests",
            500: "Internal Server Error", 503: "Service Unavailable"}  # fmt: skip


def parse_command(command: str) -> list[str]:
    """Split a command as the Daytona daemon does (process/execute): on spaces outside quotes;
    single or double quotes group, the other quote character is literal inside, no escapes."""
    args: list[str] = []
    current: list[str] = []
    quote: str | None = None
    for ch in command:
        if ch in "\"'":
            if quote is None:
                quote = ch
            elif quote == ch:
                quote = None
            else:
                current.append(ch)
        elif ch == " " and quote is None:
            if current:
                args.append("".join(current))
                current = []
        else:
            current.append(ch)
    if current:
        args.append("".join(current))
    return args


@dataclass
class _Command:
    id: str
    command: str
    exit_code: int | None = None
    stdout: str = ""
    stderr: str = ""


@dataclass
class _Session:
    shell: Any  # rtax.substrates.docker_session.ShellSession
    commands: dict[str, _Command] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)


@dataclass
class _Sandbox:
    """One emulated sandbox: its API record and the container behind it."""

    id: str
    name: str
    body: dict[str, Any]
    image: str
    state: str = "creating"
    error_reason: str | None = None
    env: Environment | None = None
    created_at: str = field(default_factory=lambda: datetime.now(UTC).isoformat())
    sessions: dict[str, _Session] = field(default_factory=dict)
    #: held while the container is being made or removed (delete waits for a start in progress)
    lock: threading.Lock = field(default_factory=threading.Lock)


class _HttpError(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


class DaytonaEmulation(LoopbackServer):
    """The Daytona API, toolbox and socket.io gateway on 127.0.0.1; see the module docstring."""

    kind = "daytona"

    def __init__(
        self,
        image: str = RUNNER_IMAGE,
        port: int = 0,
        snapshots: dict[str, str] | None = None,
        start_delay_s: float = 0.0,
    ) -> None:
        self.image = image
        self.port = port
        self.snapshots = dict(snapshots or {"rtax-runner": image})
        self.start_delay_s = start_delay_s
        #: A fake key, made up here: the SDK refuses to start without one. Never a real one.
        self.api_key = "rtax-emulated-" + secrets.token_hex(8)
        self.sandboxes: dict[str, _Sandbox] = {}
        #: (route, method, path, clock time) of every HTTP request served, for tests
        self.requests: list[tuple[str, str, str, float]] = []
        #: the JSON body of every create request, for tests (labels, intervals)
        self.create_bodies: list[dict[str, Any]] = []
        #: sandbox name -> id of every sandbox made (kept after deletion), for tests
        self.ids_by_name: dict[str, str] = {}
        #: (event name, sandbox id, new state or None, clock time) of every event emitted
        self.events: list[tuple[str, str, str | None, float]] = []
        #: socket.io connections accepted (the SDK's event channel)
        self.socket_connections = 0
        self._faults: dict[str, deque[tuple[int | None, str, float]]] = {}
        self._fail_start: deque[str] = deque()
        self._lock = threading.Lock()
        self._backing: Any = None
        self._made: set[str] = set()  # container ids made by this emulation
        self._pool: ThreadPoolExecutor | None = None
        self._server: Any = None
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._sio: Any = None
        self._started = False

    # -- fault injection -------------------------------------------------------------------

    def inject(
        self,
        route: str,
        status: int | None,
        message: str = "",
        times: int = 1,
        delay_s: float = 0.0,
    ) -> None:
        """Answer the next `times` requests on `route` with HTTP `status` (e.g. "create", 403;
        "create", 429; "execute", 500), or, with `status` None, serve them normally but hold
        the answer back `delay_s` seconds (an API that does the work and answers late).
        Routes: create, get, list, delete, toolbox_url, execute, session_create, session_exec,
        session_list, session_get, session_delete, command_get, command_logs."""
        with self._lock:
            queue = self._faults.setdefault(route, deque())
            text = message or _REASONS.get(status or 0, "error")
            queue.extend([(status, text, delay_s)] * times)

    def fail_next_start(self, reason: str) -> None:
        """The next sandbox created goes to state ``error`` with `reason` instead of starting."""
        with self._lock:
            self._fail_start.append(reason)

    def set_error(self, sandbox_id: str, reason: str) -> None:
        """A started sandbox breaks: its container is removed and it enters state ``error``."""
        sandbox = self.sandboxes[sandbox_id]
        with sandbox.lock:
            self._remove_container(sandbox)
            sandbox.error_reason = reason
            self._transition(sandbox, "error")

    def requests_for(self, route: str) -> list[tuple[str, str, str, float]]:
        return [r for r in self.requests if r[0] == route]

    # -- life of the server ----------------------------------------------------------------

    def start(self) -> None:
        """Reap dead runs' backing containers, then serve on 127.0.0.1 until `stop`."""
        if self._started:
            return
        import uvicorn

        from rtax import reaper
        from rtax.substrates.docker import DockerSubstrate

        self._backing = DockerSubstrate(name="daytona-emulation", image=self.image)
        reaper.reap([self._backing])  # orphans only: a live process's containers are kept
        self._pool = ThreadPoolExecutor(max_workers=32, thread_name_prefix="daytona-emu")
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("127.0.0.1", self.port))
        self.port = sock.getsockname()[1]
        config = uvicorn.Config(
            identified(self._app(), self.kind),
            log_level="warning",
            lifespan="off",
            ws="websockets-sansio",
        )
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(
            target=self._server.run, kwargs={"sockets": [sock]}, daemon=True,
            name="daytona-emulation",
        )  # fmt: skip
        self._thread.start()
        deadline = clock() + 30
        while not self._server.started:
            if not self._thread.is_alive() or clock() > deadline:
                raise RuntimeError("the Daytona emulation did not start serving")
            threading.Event().wait(0.005)  # polling the server's own flag, bounded
        self._started = True

    def stop(self) -> None:
        """Stop serving and remove every container this emulation made (idempotent)."""
        if self._server is not None:
            self._server.should_exit = True
        if self._thread is not None:
            self._thread.join(timeout=30)
            self._thread = None
        if self._pool is not None:
            self._pool.shutdown(wait=True)
            self._pool = None
        for sandbox in list(self.sandboxes.values()):
            with sandbox.lock:
                self._remove_container(sandbox)
        if self._backing is not None:
            for leftover in self._backing.leftovers():
                if leftover.env_id in self._made:
                    self._backing.destroy(leftover, 60)
        self.sandboxes.clear()
        self._started = False

    def substrate_params(self) -> dict[str, Any]:
        from rtax.substrates.docker import DockerSubstrate

        return {
            "api_url": f"{self.url}/api",
            "api_key": self.api_key,  # made up here; the SDK insists on having one
            "target": "emulated",
            "snapshot": next(iter(self.snapshots)),
            "fidelity": "emulated",
            "host_address": DockerSubstrate().host_address,
        }

    # -- the ASGI application ----------------------------------------------------------------

    def _app(self) -> Any:
        import socketio
        from starlette.applications import Starlette
        from starlette.routing import Route

        sio = socketio.AsyncServer(async_mode="asgi", cors_allowed_origins=[])
        self._sio = sio

        @sio.event
        async def connect(sid: str, environ: dict[str, Any], auth: Any) -> None:
            token = auth.get("token") if isinstance(auth, dict) else None
            if token != self.api_key:
                raise socketio.exceptions.ConnectionRefusedError("Unauthorized")
            self._loop = asyncio.get_running_loop()
            self.socket_connections += 1
            await sio.enter_room(sid, ORGANIZATION_ID)

        api, box = "/api/sandbox", "/toolbox/{sid}/process"
        routes = [
            Route(api, self._endpoint("create", self._create), methods=["POST"]),
            Route(api, self._endpoint("list", self._list), methods=["GET"]),
            Route(api + "/{ref}", self._endpoint("get", self._get), methods=["GET"]),
            Route(api + "/{ref}", self._endpoint("delete", self._delete), methods=["DELETE"]),
            Route(
                api + "/{ref}/toolbox-proxy-url",
                self._endpoint("toolbox_url", self._toolbox_url),
                methods=["GET"],
            ),
            Route(box + "/execute", self._endpoint("execute", self._execute), methods=["POST"]),
            Route(
                box + "/session",
                self._endpoint("session_create", self._session_create),
                methods=["POST"],
            ),
            Route(
                box + "/session",
                self._endpoint("session_list", self._session_list),
                methods=["GET"],
            ),
            Route(
                box + "/session/{session}",
                self._endpoint("session_get", self._session_get),
                methods=["GET"],
            ),
            Route(
                box + "/session/{session}",
                self._endpoint("session_delete", self._session_delete),
                methods=["DELETE"],
            ),
            Route(
                box + "/session/{session}/exec",
                self._endpoint("session_exec", self._session_exec),
                methods=["POST"],
            ),
            Route(
                box + "/session/{session}/command/{cmd}",
                self._endpoint("command_get", self._command_get),
                methods=["GET"],
            ),
            Route(
                box + "/session/{session}/command/{cmd}/logs",
                self._endpoint("command_logs", self._command_logs),
                methods=["GET"],
            ),
        ]
        return socketio.ASGIApp(sio, other_asgi_app=Starlette(routes=routes),
                                socketio_path="/api/socket.io")  # fmt: skip

    def _endpoint(self, route: str, handler: Any) -> Any:
        """Wrap a handler: log, check the bearer token, apply injected faults, map errors to
        the API's JSON envelope. Handlers run in worker threads (Docker calls block)."""
        from starlette.concurrency import run_in_threadpool
        from starlette.responses import JSONResponse, Response

        async def endpoint(request: Any) -> Any:
            self._loop = asyncio.get_running_loop()
            self.requests.append((route, request.method, request.url.path, clock()))
            try:
                if request.headers.get("authorization") != f"Bearer {self.api_key}":
                    raise _HttpError(401, "Invalid credentials")
                with self._lock:
                    queue = self._faults.get(route)
                    fault = queue.popleft() if queue else None
                if fault is not None and fault[0] is not None:
                    raise _HttpError(fault[0], fault[1])
                body = await request.json() if request.method == "POST" else None
                status, payload = await run_in_threadpool(
                    handler, dict(request.path_params), dict(request.query_params), body
                )
                if fault is not None:
                    await asyncio.sleep(fault[2])  # the injected late answer
            except _HttpError as exc:
                envelope = {
                    "statusCode": exc.status,
                    "message": exc.message,
                    "error": _REASONS.get(exc.status, "Error"),
                }
                return JSONResponse(envelope, status_code=exc.status)
            if payload is None:
                return Response(status_code=status)
            return JSONResponse(payload, status_code=status)

        return endpoint

    # -- API ---------------------------------------------------------------------------------

    def _dto(self, sandbox: _Sandbox) -> dict[str, Any]:
        body = sandbox.body
        return {
            "id": sandbox.id,
            "organizationId": ORGANIZATION_ID,
            "name": sandbox.name,
            "snapshot": body.get("snapshot"),
            "user": body.get("user") or "root",
            "env": body.get("env") or {},
            "labels": body.get("labels") or {},
            "public": bool(body.get("public")),
            "networkBlockAll": bool(body.get("networkBlockAll")),
            "kvm": False,
            "target": body.get("target") or "emulated",
            "cpu": body.get("cpu") or 1,
            "gpu": 0,
            "memory": body.get("memory") or 1,
            "disk": body.get("disk") or 3,
            "state": sandbox.state,
            "desiredState": "destroyed" if sandbox.state.startswith("destroy") else "started",
            "errorReason": sandbox.error_reason,
            "recoverable": False,
            "autoStopInterval": body.get("autoStopInterval", 15),
            "autoArchiveInterval": body.get("autoArchiveInterval", 10080),
            "autoDeleteInterval": body.get("autoDeleteInterval", -1),
            "createdAt": sandbox.created_at,
            "updatedAt": datetime.now(UTC).isoformat(),
            "toolboxProxyUrl": f"{self.url}/toolbox",
        }

    def _find(self, ref: str) -> _Sandbox:
        sandbox = self.sandboxes.get(ref)
        if sandbox is None:
            # list(): provisioning and deletion threads change the dict meanwhile
            sandbox = next((s for s in list(self.sandboxes.values()) if s.name == ref), None)
        if sandbox is None:
            raise _HttpError(404, f"Sandbox with ID or name {ref} not found")
        return sandbox

    def _create(self, path: dict, query: dict, body: dict) -> tuple[int, Any]:
        self.create_bodies.append(body)
        if body.get("snapshot"):
            image = self.snapshots.get(body["snapshot"])
            if image is None:
                raise _HttpError(404, f"Snapshot {body['snapshot']} not found")
        elif body.get("buildInfo"):
            lines = (body["buildInfo"].get("dockerfileContent") or "").strip().splitlines()
            if len(lines) != 1 or not lines[0].startswith("FROM "):
                raise _HttpError(400, "the emulation builds only a bare 'FROM <image>'")
            image = lines[0].split()[1]
        else:
            image = self.image
        sandbox_id = str(uuid.uuid4())
        name = body.get("name") or sandbox_id
        if any(s.name == name for s in list(self.sandboxes.values())):
            raise _HttpError(409, f"Sandbox with name {name} already exists")
        sandbox = _Sandbox(id=sandbox_id, name=name, body=body, image=image)
        self.ids_by_name[name] = sandbox_id
        with self._lock:
            self.sandboxes[sandbox_id] = sandbox
            fail = self._fail_start.popleft() if self._fail_start else None
        self._emit("sandbox.created", sandbox, None)
        assert self._pool is not None
        self._pool.submit(self._provision, sandbox, fail)
        return 200, self._dto(sandbox)

    def _provision(self, sandbox: _Sandbox, fail: str | None) -> None:
        """creating -> started once the container runs; -> error if it can't (or if told to)."""
        with sandbox.lock:
            if sandbox.state != "creating":
                return  # deleted before it started
            if self.start_delay_s:
                threading.Event().wait(self.start_delay_s)  # modelled provisioning time
            if sandbox.state != "creating":
                return  # deleted while provisioning: it must not come back as started
            if fail is not None:
                sandbox.error_reason = fail
                self._transition(sandbox, "error")
                return
            try:
                from rtax.substrates.docker import DockerSubstrate

                backing = self._backing
                if sandbox.image != self.image:
                    backing = DockerSubstrate(name="daytona-emulation", image=sandbox.image)
                sandbox.env = backing.create(sandbox.id)
                self._made.add(sandbox.env.env_id)
                backing.wait_running(sandbox.env, 120)
            except SubstrateError as exc:
                sandbox.error_reason = f"{type(exc).__name__}: {exc}"
                self._transition(sandbox, "error")
                return
            if sandbox.state == "creating":  # not deleted while its container was made
                self._transition(sandbox, "started")

    def _list(self, path: dict, query: dict, body: Any) -> tuple[int, Any]:
        wanted = json.loads(query["labels"]) if query.get("labels") else {}
        items = [
            self._dto(s)
            for s in list(self.sandboxes.values())
            if s.state != "destroyed"
            and all((s.body.get("labels") or {}).get(k) == v for k, v in wanted.items())
        ]
        return 200, {"items": items, "nextCursor": None}

    def _get(self, path: dict, query: dict, body: Any) -> tuple[int, Any]:
        return 200, self._dto(self._find(path["ref"]))

    def _toolbox_url(self, path: dict, query: dict, body: Any) -> tuple[int, Any]:
        self._find(path["ref"])
        return 200, {"url": f"{self.url}/toolbox"}

    def _delete(self, path: dict, query: dict, body: Any) -> tuple[int, Any]:
        sandbox = self._find(path["ref"])
        if sandbox.state not in ("destroying", "destroyed"):
            self._transition(sandbox, "destroying")
            assert self._pool is not None
            self._pool.submit(self._destroy, sandbox)
        return 200, self._dto(sandbox)

    def _destroy(self, sandbox: _Sandbox) -> None:
        """destroying -> destroyed once the container is gone; then the record is dropped."""
        with sandbox.lock:
            self._remove_container(sandbox)
            self._transition(sandbox, "destroyed")
            self.sandboxes.pop(sandbox.id, None)

    def _remove_container(self, sandbox: _Sandbox) -> None:
        for session in sandbox.sessions.values():
            session.shell.close()
        sandbox.sessions.clear()
        if sandbox.env is not None:
            with contextlib.suppress(SubstrateError):
                self._backing.destroy(sandbox.env, 60)
            sandbox.env = None

    def _transition(self, sandbox: _Sandbox, state: str) -> None:
        old, sandbox.state = sandbox.state, state
        self._emit("sandbox.state.updated", sandbox, old)

    def _emit(self, event: str, sandbox: _Sandbox, old_state: str | None) -> None:
        dto = self._dto(sandbox)
        payload = dto if event == "sandbox.created" else {
            "sandbox": dto, "oldState": old_state, "newState": sandbox.state,
        }  # fmt: skip
        new_state = None if event == "sandbox.created" else sandbox.state
        self.events.append((event, sandbox.id, new_state, clock()))
        if self._loop is not None and self._sio is not None and not self._loop.is_closed():
            asyncio.run_coroutine_threadsafe(
                self._sio.emit(event, payload, room=ORGANIZATION_ID), self._loop
            )

    # -- toolbox -------------------------------------------------------------------------------

    def _running(self, sandbox_id: str) -> _Sandbox:
        sandbox = self._find(sandbox_id)
        if sandbox.state != "started" or sandbox.env is None:
            raise _HttpError(400, f"Sandbox {sandbox_id} is not started (state {sandbox.state})")
        return sandbox

    def _execute(self, path: dict, query: dict, body: dict) -> tuple[int, Any]:
        sandbox = self._running(path["sid"])
        argv = parse_command(body.get("command") or "")
        if not argv:
            raise _HttpError(400, "empty command")
        timeout = body.get("timeout")
        limit = float(timeout) if isinstance(timeout, int) and timeout > 0 else _NO_TIMEOUT_S
        script = "exec 2>&1; exec " + shlex.join(argv)  # one buffer for both, as the daemon
        if body.get("cwd"):
            script = f"cd {shlex.quote(body['cwd'])} || exit 1; {script}"
        try:
            result = self._backing.run(sandbox.env, script, limit)
        except CommandTimeout:
            raise _HttpError(
                408,
                f"Command execution timed out after {timeout} seconds. The timeout can be "
                "increased by adjusting the timeout parameter in the request.",
            ) from None
        except SubstrateError as exc:
            raise _HttpError(400, str(exc)) from None
        return 200, {"exitCode": result.exit_code, "result": result.stdout + result.stderr}

    def _session(self, path: dict) -> tuple[_Sandbox, _Session]:
        sandbox = self._running(path["sid"])
        session = sandbox.sessions.get(path["session"])
        if session is None:
            raise _HttpError(404, "session not found")
        return sandbox, session

    def _session_create(self, path: dict, query: dict, body: dict) -> tuple[int, Any]:
        from rtax.substrates.docker_session import ShellSession

        sandbox = self._running(path["sid"])
        session_id = body.get("sessionId")
        if not session_id:
            raise _HttpError(400, "sessionId is required")
        if session_id in sandbox.sessions:
            raise _HttpError(409, "session already exists")
        assert sandbox.env is not None
        try:
            shell = ShellSession.open(self._backing.api, sandbox.env.env_id)
        except SubstrateError as exc:
            raise _HttpError(500, str(exc)) from None
        sandbox.sessions[session_id] = _Session(shell)
        return 201, None

    def _session_view(self, session_id: str, session: _Session) -> dict[str, Any]:
        commands = [
            {"id": c.id, "command": c.command, "exitCode": c.exit_code}
            for c in session.commands.values()
        ]
        return {"sessionId": session_id, "commands": commands}

    def _session_list(self, path: dict, query: dict, body: Any) -> tuple[int, Any]:
        sandbox = self._running(path["sid"])
        return 200, [self._session_view(k, s) for k, s in sandbox.sessions.items()]

    def _session_get(self, path: dict, query: dict, body: Any) -> tuple[int, Any]:
        _, session = self._session(path)
        return 200, self._session_view(path["session"], session)

    def _session_delete(self, path: dict, query: dict, body: Any) -> tuple[int, Any]:
        sandbox, session = self._session(path)
        session.shell.close()
        sandbox.sessions.pop(path["session"], None)
        return 204, None

    def _session_exec(self, path: dict, query: dict, body: dict) -> tuple[int, Any]:
        _, session = self._session(path)
        command = (body.get("command") or "").strip()
        if not command:
            raise _HttpError(400, "command cannot be empty")
        cmd = _Command(id=str(uuid.uuid4()), command=command)
        session.commands[cmd.id] = cmd
        if body.get("runAsync") or body.get("async"):
            assert self._pool is not None
            self._pool.submit(self._session_run, session, cmd)
            return 202, {"cmdId": cmd.id}
        self._session_run(session, cmd)
        return 200, {
            "cmdId": cmd.id,
            "exitCode": cmd.exit_code,
            "output": cmd.stdout + cmd.stderr,
            "stdout": cmd.stdout,
            "stderr": cmd.stderr,
        }

    def _session_run(self, session: _Session, cmd: _Command) -> None:
        """One command in the session's shell; the daemon has no per-command timeout."""
        with session.lock:
            try:
                result = session.shell.run(cmd.command, _NO_TIMEOUT_S)
            except SubstrateError as exc:
                cmd.exit_code, cmd.stderr = 1, f"session cancelled: {exc}"
                return
            cmd.stdout, cmd.stderr, cmd.exit_code = result.stdout, result.stderr, result.exit_code

    def _command(self, path: dict) -> _Command:
        _, session = self._session(path)
        cmd = session.commands.get(path["cmd"])
        if cmd is None:
            raise _HttpError(404, "command not found")
        return cmd

    def _command_get(self, path: dict, query: dict, body: Any) -> tuple[int, Any]:
        cmd = self._command(path)
        return 200, {"id": cmd.id, "command": cmd.command, "exitCode": cmd.exit_code}

    def _command_logs(self, path: dict, query: dict, body: Any) -> tuple[int, Any]:
        cmd = self._command(path)
        return 200, {"output": cmd.stdout + cmd.stderr, "stdout": cmd.stdout, "stderr": cmd.stderr}
