"""`DaytonaEmulation`: the routes, the socket.io gateway, where faults are matched; start, stop.

Why (docs/emulations.md): this is the one object a test or ``rtax emulate`` holds. It serves
the API and the toolbox over HTTP (Starlette + uvicorn) and the notification gateway over
socket.io, checks the bearer token, answers the faults a test plants in ``faults``
(`rtax.emulation.faults`) in the API's error envelope, and leaves the sandboxes to `sandboxes`
and the commands to `toolbox`.
"""

from __future__ import annotations

import asyncio
import json
import secrets
import socket
import threading
from collections.abc import Callable
from typing import Any

from rtax.assets.image import RUNNER_IMAGE
from rtax.emulation import LoopbackServer, identified
from rtax.emulation.daytona.api import BACKGROUND, OPERATIONS, ORGANIZATION_ID, ROUTES, HttpError
from rtax.emulation.daytona.sandboxes import Sandbox, Sandboxes
from rtax.emulation.daytona.toolbox import Answer, Toolbox
from rtax.emulation.faults import Faults
from rtax.substrates.base import clock


class DaytonaEmulation(LoopbackServer):
    """The Daytona API, toolbox and socket.io gateway on 127.0.0.1; see the package docstring."""

    kind = "daytona"

    def __init__(
        self,
        image: str = RUNNER_IMAGE,
        port: int = 0,
        snapshots: dict[str, str] | None = None,
    ) -> None:
        self.image = image
        self.port = port
        self.snapshots = dict(snapshots or {"rtax-runner": image})
        #: A fake key, made up here: the SDK refuses to start without one. Never a real one.
        self.api_key = "rtax-emulated-" + secrets.token_hex(8)
        #: what the API does next instead of its normal course (`rtax.emulation.faults`)
        self.faults = Faults(OPERATIONS, BACKGROUND)
        self.state = Sandboxes(
            image, self.snapshots, self.faults, self._emit, lambda: f"{self.url}/toolbox"
        )
        self.toolbox = Toolbox(self.state)
        #: (route, method, path, clock time) of every HTTP request served, for tests
        self.requests: list[tuple[str, str, str, float]] = []
        #: socket.io connections accepted (the SDK's event channel)
        self.socket_connections = 0
        self._server: Any = None
        self._thread: threading.Thread | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._sio: Any = None
        self._emit_lock: asyncio.Lock | None = None
        self._started = False

    # -- what tests read and do ----------------------------------------------------------------

    @property
    def sandboxes(self) -> dict[str, Sandbox]:
        return self.state.by_id

    @property
    def create_bodies(self) -> list[dict[str, Any]]:
        """The JSON body of every create request (labels, intervals)."""
        return self.state.create_bodies

    @property
    def ids_by_name(self) -> dict[str, str]:
        """Sandbox name -> id of every sandbox made (kept after deletion)."""
        return self.state.ids_by_name

    @property
    def events(self) -> list[tuple[str, str, str | None, float]]:
        """(event name, sandbox id, new state or None, clock time) of every event emitted."""
        return self.state.events

    def requests_for(self, route: str) -> list[tuple[str, str, str, float]]:
        return [r for r in self.requests if r[0] == route]

    def set_error(self, sandbox_id: str, reason: str) -> None:
        """A started sandbox breaks now: its container is removed and it enters state
        ``error`` (an event on one sandbox, not a fault planted on an operation)."""
        self.state.set_error(sandbox_id, reason)

    # -- life of the server ----------------------------------------------------------------

    def start(self) -> None:
        """Reap dead runs' backing containers, then serve on 127.0.0.1 until `stop`."""
        if self._started:
            return
        import uvicorn

        self.state.start()
        self.faults.open()
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
        self.faults.close()
        if self._server is not None:
            self._server.should_exit = True
        if self._thread is not None:
            self._thread.join(timeout=30)
            self._thread = None
        self.state.stop()
        self._started = False

    def substrate_params(self) -> dict[str, Any]:
        from rtax.substrates.docker.substrate import DockerSubstrate

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
        self._emit_lock = None  # a new server, a new loop

        @sio.event
        async def connect(sid: str, environ: dict[str, Any], auth: Any) -> None:
            token = auth.get("token") if isinstance(auth, dict) else None
            if token != self.api_key:
                raise socketio.exceptions.ConnectionRefusedError("Unauthorized")
            self._loop = asyncio.get_running_loop()
            self.socket_connections += 1
            await sio.enter_room(sid, ORGANIZATION_ID)

        api: dict[str, Callable[[dict, dict, Any], Answer]] = {
            "create": self._create,
            "list": self._list,
            "get": self._get,
            "delete": self._delete,
            "toolbox_url": self._toolbox_url,
            "sandbox_snapshot": self._sandbox_snapshot,
            "fork": self._fork,
            "pause": self._pause,
            "start_sandbox": self._start_sandbox,
            "snapshot_get": self._snapshot_get,
            "snapshot_delete": self._snapshot_delete,
        }
        routes = [
            Route(path, self._endpoint(op, api.get(op) or getattr(self.toolbox, op)), methods=[m])
            for op, (m, path) in ROUTES.items()
        ]
        return socketio.ASGIApp(sio, other_asgi_app=Starlette(routes=routes),
                                socketio_path="/api/socket.io")  # fmt: skip

    def _endpoint(self, route: str, handler: Callable[[dict, dict, Any], Answer]) -> Any:
        """Wrap a handler: log, check the bearer token, match the planted faults (the one
        place), map errors to the API's JSON envelope. Handlers run in worker threads (Docker
        calls block). A fault's delay holds the answer back (after the work, if it is done)."""
        from starlette.concurrency import run_in_threadpool
        from starlette.responses import JSONResponse, Response

        async def endpoint(request: Any) -> Any:
            self._loop = asyncio.get_running_loop()
            self.requests.append((route, request.method, request.url.path, clock()))
            fault = None
            try:
                if request.headers.get("authorization") != f"Bearer {self.api_key}":
                    raise HttpError(401, "Invalid credentials")
                fault = self.faults.take(route)
                if fault is not None and fault.refuses:
                    assert fault.status is not None
                    raise HttpError(fault.status, fault.message, fault.code, fault.headers)
                # a POST without a body (pause, start) has none to parse
                raw = await request.body() if request.method == "POST" else b""
                body = json.loads(raw) if raw else ({} if request.method == "POST" else None)
                status, payload = await run_in_threadpool(
                    handler, dict(request.path_params), dict(request.query_params), body
                )
                if fault is not None and fault.failing:  # accepted: done, then the error
                    assert fault.status is not None
                    raise HttpError(fault.status, fault.message, fault.code, fault.headers)
            except HttpError as exc:
                answer: Any = JSONResponse(exc.envelope(), exc.status, headers=exc.headers)
            else:
                answer = Response(status_code=status) if payload is None else JSONResponse(
                    payload, status_code=status
                )  # fmt: skip
            if fault is not None:
                await self.faults.wait_async(fault.delay_s)
            return answer

        return endpoint

    def _emit(self, event: str, payload: Any) -> None:
        """Send `event` to the organization's room (from any thread), once a client is on."""
        if self._loop is not None and self._sio is not None and not self._loop.is_closed():
            asyncio.run_coroutine_threadsafe(self._emit_in_order(event, payload), self._loop)

    async def _emit_in_order(self, event: str, payload: Any) -> None:
        """One event after the other, in the order they were emitted: each ``emit`` awaits
        inside, so two sent at once (a sandbox's ``pausing`` and, a few ms later, ``paused``)
        could otherwise reach a client swapped, and the SDK's cached state end on the older.
        The coroutines start in the order scheduled, and the lock queues them in that order."""
        if self._emit_lock is None:  # made on the server's loop, on first use
            self._emit_lock = asyncio.Lock()
        async with self._emit_lock:
            await self._sio.emit(event, payload, room=ORGANIZATION_ID)

    # -- the API's sandbox routes ------------------------------------------------------------

    def _create(self, path: dict, query: dict, body: dict) -> Answer:
        return 200, self.state.dto(self.state.create(body))

    def _list(self, path: dict, query: dict, body: Any) -> Answer:
        return 200, {"items": self.state.matching(query.get("labels")), "nextCursor": None}

    def _get(self, path: dict, query: dict, body: Any) -> Answer:
        return 200, self.state.dto(self.state.find(path["ref"]))

    def _toolbox_url(self, path: dict, query: dict, body: Any) -> Answer:
        self.state.find(path["ref"])
        return 200, {"url": f"{self.url}/toolbox"}

    def _delete(self, path: dict, query: dict, body: Any) -> Answer:
        return 200, self.state.dto(self.state.delete(path["ref"]))

    # -- snapshots, forks and pauses (`sandboxes`, `snapshots`) ------------------------------

    def _sandbox_snapshot(self, path: dict, query: dict, body: dict) -> Answer:
        if body.get("includeMemory"):  # as Daytona: memory snapshots are for VM sandboxes
            raise HttpError(400, "Container sandboxes do not support memory snapshots")
        return 200, self.state.dto(self.state.snapshot(path["ref"], body.get("name") or ""))

    def _fork(self, path: dict, query: dict, body: dict) -> Answer:
        return 200, self.state.dto(self.state.fork(path["ref"], body.get("name")))

    def _pause(self, path: dict, query: dict, body: Any) -> Answer:
        return 200, self.state.dto(self.state.pause(path["ref"]))

    def _start_sandbox(self, path: dict, query: dict, body: Any) -> Answer:
        return 200, self.state.dto(self.state.start_sandbox(path["ref"]))

    def _snapshot_get(self, path: dict, query: dict, body: Any) -> Answer:
        return 200, self.state.store.dto(self.state.store.find(path["ref"]))

    def _snapshot_delete(self, path: dict, query: dict, body: Any) -> Answer:
        self.state.store.delete(path["ref"])
        self.state.store.sweep(self.state.backing.api)  # its image, unless a sandbox uses it
        return 200, None
