"""`KubernetesEmulation`: the API server's routes, where faults are matched, start and stop.

Why (docs/emulations.md): this is the one object a test or ``rtax emulate`` holds. It answers
the core/v1 requests a rollout makes (version, pods: create, get, list, watch, delete; events:
list, watch; exec) as the real API server does, using `api` for the rules, `etcd` for the
objects and watches, `kubelet` for the pods' containers and `exec` for the exec channel; and it
answers the faults a test plants in ``faults`` (`rtax.emulation.faults`) as a real cluster
shows them (errors with the v1 ``Status``, lost answers, a held scheduler).
"""

from __future__ import annotations

import contextlib
import copy
import json
import logging
import shlex
import socket
import threading
import time
import uuid
from collections.abc import Callable
from typing import Any

from rtax.assets.image import RUNNER_IMAGE
from rtax.emulation import LoopbackServer, identified
from rtax.emulation.faults import Fault, Faults
from rtax.emulation.kubernetes.api import (
    field_matcher,
    grace_period,
    is_true,
    label_matcher,
    qos_class,
    status_body,
    timestamp,
    validate_pod,
)
from rtax.emulation.kubernetes.etcd import Etcd, with_kind
from rtax.emulation.kubernetes.exec import refuse, run_exec
from rtax.emulation.kubernetes.kubelet import Kubelet

#: The operations a fault can be planted on (`rtax.emulation.faults`).
OPERATIONS = {
    "version": "GET /version",
    "create": "POST a pod",
    "get": "GET a pod",
    "delete": "DELETE a pod",
    "list": "list pods",
    "events": "list events",
    "watch": "watch pods or events",
    "exec": "the exec WebSocket upgrade",
}
BACKGROUND = {"schedule": "the scheduler binding a new pod to the node"}
#: The ``reason`` of an error ``Status`` by HTTP status, when a fault names none.
_REASONS = {403: "Forbidden", 422: "Invalid", 429: "TooManyRequests", 500: "InternalError"}


class KubernetesEmulation(LoopbackServer):
    """The API server, scheduler and kubelet of a one-node cluster, on 127.0.0.1.

    Use as a context manager, or `start()` / `stop()`. `token`, when given, is required as a
    bearer token on every request (401 otherwise), so that a test can check that credentials are
    sent and never recorded."""

    kind = "kubernetes"

    def __init__(
        self,
        image: str = RUNNER_IMAGE,
        port: int = 0,
        namespaces: tuple[str, ...] = ("default",),
        token: str | None = None,
        backoff_after_s: float = 0.2,
    ) -> None:
        self.image = image
        self.port = port
        self.namespaces = set(namespaces)
        self.token = token
        self.state = Etcd()
        #: what the API does next instead of its normal course (`rtax.emulation.faults`)
        self.faults = Faults(OPERATIONS, BACKGROUND)
        self.kubelet = Kubelet(self.state, image, backoff_after_s, self.faults)
        self._server: Any = None
        self._thread: threading.Thread | None = None
        #: the subprotocol of every exec, in order (tests check the negotiation)
        self.exec_protocols: list[str] = []
        self.requests: list[tuple[str, str]] = []  # (method, path) of every request

    # -- life ------------------------------------------------------------------------------------

    def start(self) -> None:
        """Reap the backing containers of a dead process, then serve; return once serving."""
        import uvicorn

        from rtax.substrates import reaper

        if self._thread is not None:
            return
        reaper.reap([self.kubelet.docker(self.image)])
        self.faults.open()
        self.kubelet.start()
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("127.0.0.1", self.port))
        self.port = sock.getsockname()[1]
        config = uvicorn.Config(
            identified(self._app(), self.kind),
            log_level="warning",
            access_log=False,
            ws="websockets-sansio",
            timeout_graceful_shutdown=2,
            lifespan="off",
        )
        logging.getLogger("uvicorn.error").addFilter(_denial_is_complete)
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(
            target=self._server.run, kwargs={"sockets": [sock]}, daemon=True, name="k8s-api"
        )
        self._thread.start()
        deadline = time.monotonic() + 30
        while not self._server.started:  # uvicorn's own readiness flag, polled with a deadline
            if not self._thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError("the Kubernetes emulation did not start")
            time.sleep(0.005)

    def stop(self) -> None:
        """Stop serving, then remove every container this emulation made. Idempotent."""
        if self._thread is not None:
            self.state.closed = True
            self.faults.close()
            self.state.wake()
            self._server.should_exit = True
            self._thread.join(timeout=30)
            self._thread = None
        self.kubelet.stop()

    def substrate_params(self) -> dict[str, Any]:
        """Point a `kubernetes` substrate here: a direct API URL, no TLS, no credential. When
        this emulation was told to require a token, the caller gives the substrate that token
        itself (the tests do, through ``token_env``)."""
        params: dict[str, Any] = {
            "host": self.url,
            "image": self.image,
            "fidelity": "emulated",
            "host_address": self.kubelet.docker(self.image).host_address,
        }
        return params

    # -- inspection for tests --------------------------------------------------------------------

    def pod(self, name: str, namespace: str = "default") -> dict[str, Any] | None:
        return self.state.get("pods", namespace, name)

    def container_of(self, name: str, namespace: str = "default") -> str | None:
        """The id of the Docker container backing a pod, or None."""
        pod = self.pod(name, namespace)
        env = self.kubelet.envs.get(pod["metadata"]["uid"]) if pod else None
        return env.env_id if env else None

    # -- HTTP ------------------------------------------------------------------------------------

    def _app(self) -> Any:
        from starlette.applications import Starlette
        from starlette.routing import Route, WebSocketRoute

        pods = "/api/v1/namespaces/{ns}/pods"
        version = self._endpoint("version", self._version)
        return Starlette(
            routes=[
                Route("/version", version),
                Route("/version/", version),  # where the Python client asks
                Route("/api/v1/namespaces/{ns}/events", self._endpoint("events", self._events)),
                Route(pods, self._endpoint("create", self._create), methods=["POST"]),
                Route(pods, self._endpoint("list", self._pods), methods=["GET"]),
                Route(pods + "/{name}", self._endpoint("get", self._pod), methods=["GET"]),
                Route(pods + "/{name}", self._endpoint("delete", self._pod), methods=["DELETE"]),
                Route(pods + "/{name}/exec", self._exec_no_upgrade, methods=["GET", "POST"]),
                WebSocketRoute(pods + "/{name}/exec", self._exec),
            ]
        )

    def _admit(self, conn: Any, op: str) -> tuple[Any, Fault | None]:
        """The one place a request meets authentication and the planted faults: the error
        response it gets instead of being served (or None), and its fault (or None)."""
        from starlette.responses import JSONResponse

        self.requests.append((conn.scope.get("method", "WS"), conn.url.path))
        auth = conn.headers.get("authorization")
        if self.token is not None and auth != f"Bearer {self.token}":
            return JSONResponse(status_body(401, "Unauthorized", "Unauthorized"), 401), None
        fault = self.faults.take(op)
        if fault is None or not fault.failing:
            return None, fault
        assert fault.status is not None
        reason = fault.code or _REASONS.get(fault.status, "Unknown")
        body = status_body(fault.status, reason, fault.message)
        if fault.retry_after is not None:
            body["details"] = {"retryAfterSeconds": fault.retry_after}
        return JSONResponse(body, fault.status, headers=fault.headers), fault

    def _endpoint(self, op: str, handler: Callable[[Any], Any]) -> Callable[[Any], Any]:
        """`handler` behind `_admit`; a list asked with ``watch=true`` is the ``watch``
        operation. A fault's delay holds the answer back after the work is done."""

        async def endpoint(request: Any) -> Any:
            watching = op in ("list", "events") and is_true(request.query_params.get("watch"))
            denied, fault = self._admit(request, "watch" if watching else op)
            if denied is None or (fault is not None and fault.accepted):
                answer = await handler(request)  # an accepted fault's work is done, then denied
            if denied is not None:
                answer = denied
            if fault is not None:
                await self.faults.wait_async(fault.delay_s)
            return answer

        return endpoint

    async def _version(self, request: Any) -> Any:
        from starlette.responses import JSONResponse

        return JSONResponse(
            {
                "major": "1",
                "minor": "33",
                "gitVersion": "v1.33.0-rtax-emulated",
                "platform": "linux/amd64",
            }
        )

    async def _pods(self, request: Any) -> Any:
        return await self._list(request, "pods")

    async def _events(self, request: Any) -> Any:
        return await self._list(request, "events")

    async def _create(self, request: Any) -> Any:
        from starlette.responses import JSONResponse

        ns = request.path_params["ns"]
        try:
            pod = json.loads(await request.body())
        except ValueError:
            return JSONResponse(status_body(400, "BadRequest", "invalid JSON body"), 400)
        if ns not in self.namespaces:
            return JSONResponse(
                status_body(404, "NotFound", f'namespaces "{ns}" not found', kind="namespaces"),
                404,
            )
        name = (pod.get("metadata") or {}).get("name") or ""
        if causes := validate_pod(pod):
            message = f'Pod "{name}" is invalid: ' + "; ".join(
                f"{c['field']}: {c['message']}" for c in causes
            )
            body = status_body(422, "Invalid", message, name=name, kind="Pod", causes=causes)
            return JSONResponse(body, 422)
        meta = pod["metadata"]
        meta.update(
            namespace=ns,
            uid=str(uuid.uuid4()),
            creationTimestamp=timestamp(),
            generation=1,
        )
        spec = pod.setdefault("spec", {})
        spec.setdefault("restartPolicy", "Always")
        spec.setdefault("schedulerName", "default-scheduler")
        spec.setdefault("dnsPolicy", "ClusterFirst")
        pod["status"] = {"phase": "Pending", "qosClass": qos_class(spec)}
        pod.pop("kind", None)
        pod.pop("apiVersion", None)
        with self.state.lock:
            if (ns, name) in self.state.objects["pods"]:
                body = status_body(
                    409, "AlreadyExists", f'pods "{name}" already exists', name=name, kind="pods"
                )
                return JSONResponse(body, 409)
            created = self.state.commit("pods", "ADDED", pod)
        self.kubelet.start_pod(ns, name)
        return JSONResponse(with_kind("pods", created), 201)

    async def _pod(self, request: Any) -> Any:
        from starlette.responses import JSONResponse

        ns, name = request.path_params["ns"], request.path_params["name"]
        pod = self.state.get("pods", ns, name)
        if pod is None:
            body = status_body(404, "NotFound", f'pods "{name}" not found', name=name, kind="pods")
            return JSONResponse(body, 404)
        if request.method == "DELETE":
            try:
                grace = grace_period(request.query_params, await request.body(), pod)
            except ValueError as exc:
                return JSONResponse(status_body(400, "BadRequest", str(exc)), 400)
            pod = self._delete(ns, name, pod, grace)
        return JSONResponse(with_kind("pods", pod))

    def _delete(self, ns: str, name: str, pod: dict[str, Any], grace: int) -> dict[str, Any]:
        """As the API server deletes a pod: with grace period 0, or when no node has it yet,
        the object goes at once (DELETED) and the kubelet stops the container afterwards; with
        a grace period the pod is marked terminating and goes once its container is removed."""
        uid = pod["metadata"]["uid"]

        def deleting(p: dict[str, Any]) -> None:
            p["metadata"].setdefault("deletionTimestamp", timestamp())
            p["metadata"]["deletionGracePeriodSeconds"] = grace

        with self.state.lock:
            current = self.state.objects["pods"].get((ns, name))
            if current is None or current["metadata"]["uid"] != uid:
                return pod  # deleted meanwhile
            if grace == 0 or not current["spec"].get("nodeName"):
                gone = copy.deepcopy(current)
                deleting(gone)
                gone["metadata"]["deletionGracePeriodSeconds"] = 0
                pod = self.state.commit("pods", "DELETED", gone)
            else:
                pod = self.state.update(ns, name, deleting) or pod
        self.kubelet.remove_pod(ns, name, uid, pod)
        return pod

    async def _list(self, request: Any, resource: str) -> Any:
        from starlette.responses import JSONResponse, StreamingResponse

        q = request.query_params
        watching = is_true(q.get("watch"))
        ns = request.path_params["ns"]
        try:
            labels = label_matcher(q.get("labelSelector"))
            fields = field_matcher(q.get("fieldSelector"))
        except ValueError as exc:
            return JSONResponse(status_body(400, "BadRequest", str(exc)), 400)

        def matches(obj: dict[str, Any]) -> bool:
            return (
                obj["metadata"]["namespace"] == ns
                and labels(obj["metadata"].get("labels") or {})
                and fields(obj)
            )

        if watching:
            since = q.get("resourceVersion")
            timeout = float(q.get("timeoutSeconds") or 1800)
            stream = self.state.watch(resource, matches, since, timeout)
            return StreamingResponse(stream, media_type="application/json")
        with self.state.lock:
            items = [copy.deepcopy(o) for o in self.state.objects[resource].values() if matches(o)]
            rv = str(self.state.rv)
        limit = int(q.get("limit") or 0)
        if limit:
            items = items[:limit]
        kind = "PodList" if resource == "pods" else "EventList"
        body = {
            "kind": kind,
            "apiVersion": "v1",
            "metadata": {"resourceVersion": rv},
            "items": items,
        }
        return JSONResponse(body)

    async def _exec_no_upgrade(self, request: Any) -> Any:
        from starlette.responses import JSONResponse

        message = "Upgrade request required"
        return JSONResponse(status_body(400, "BadRequest", message), 400)

    async def _exec(self, ws: Any) -> None:
        """One command over a v4/v5 channel WebSocket, run in the pod's real container."""
        denied, fault = self._admit(ws, "exec")
        if denied is not None and fault is not None and fault.accepted:
            await self._exec_unanswered(ws)  # the command runs; the answer is the error
        if fault is not None:
            # a failing one is answered late; a delayed one is an upgrade request held with
            # no answer, then dropped (the answer would have to come before the work)
            await self.faults.wait_async(fault.delay_s)
        if denied is not None:
            await ws.send_denial_response(denied)
            return
        if fault is not None:
            with contextlib.suppress(Exception):
                await ws.close()
            return
        ns, name = ws.path_params["ns"], ws.path_params["name"]
        pod = self.state.get("pods", ns, name)
        if pod is None:
            await refuse(ws, 404, "NotFound", f'pods "{name}" not found')
            return
        env = self.kubelet.envs.get(pod["metadata"]["uid"])
        sub = self.kubelet.docker(self.image)
        await run_exec(ws, pod, env, sub, self.exec_protocols)

    async def _exec_unanswered(self, ws: Any) -> None:
        """An accepted exec fault: run the command in the pod's container, answer nothing."""
        from starlette.concurrency import run_in_threadpool

        pod = self.state.get("pods", ws.path_params["ns"], ws.path_params["name"])
        env = self.kubelet.envs.get(pod["metadata"]["uid"]) if pod is not None else None
        command = ws.query_params.getlist("command")
        if env is not None and command:
            sub = self.kubelet.docker(self.image)
            with contextlib.suppress(Exception):
                await run_in_threadpool(sub.run, env, shlex.join(command), 60.0)


def _denial_is_complete(record: logging.LogRecord) -> bool:
    """Drop uvicorn's false alarm after a WebSocket denial response (an HTTP error answered
    instead of the upgrade, as the API server does): its sans-I/O protocol sent the response
    but does not count it as a completed handshake."""
    return record.getMessage() != "ASGI callable returned without completing handshake."
