"""A Kubernetes API server on loopback whose pods are real Docker containers.

Why (README.md#emulations): the `kubernetes` substrate must be exercised through the official
client over the real protocol, and its commands must really run. This server speaks the parts of
the core/v1 API that a rollout uses, as the real API server and kubelet answer them:

- pods: create (name and label validation, 422 ``Invalid`` like the API server; 409 on a taken
  name; 404 in an unknown namespace), get, list with ``labelSelector``/``fieldSelector``, and
  delete with the API server's grace period rules (``DeleteOptions`` body, else the
  ``gracePeriodSeconds`` parameter, else the pod's ``terminationGracePeriodSeconds``, else 30):
  with grace period 0, or for a pod no node has yet, the object is removed at once (the answer
  and the ``DELETED`` event carry the ``deletionTimestamp``; a GET then answers 404) and the
  kubelet removes the container in the background afterwards, so the time of a delete is the
  API's, as on a real cluster; with a grace period the pod is terminating (``deletionTimestamp``
  set) and goes (``DELETED``) once its container is removed (the grace period is not waited
  out: the container is killed at once);
- watch: ``watch=true`` streams one JSON event per line over a chunked response, from a
  ``resourceVersion`` (events after it, from a bounded history; ``410 Gone`` once it is older
  than the history) or, without one, synthetic ``ADDED`` events for the current state first;
  ``timeoutSeconds`` ends the stream;
- a kubelet: each pod goes Pending -> (scheduled, image checked, container created, started)
  -> Running, with the conditions PodScheduled, Initialized, ContainersReady and Ready and their
  transition times, container statuses, and the events Scheduled, Pulled, Created, Started
  (listable and watchable in the events API). An image that is not on the Docker engine is never
  pulled: the container waits with ``ErrImagePull`` then ``ImagePullBackOff``, as a kubelet
  reports a missing image;
- exec over WebSocket, subprotocols ``v5.channel.k8s.io`` and ``v4.channel.k8s.io`` (the first
  one the client offers wins, as in the API server): stdout on channel 1, stderr on channel 2,
  and on channel 3 the v1 ``Status`` (``Success``, or ``NonZeroExitCode`` with the exit code as
  the cause message, which is where the client reads it).

Not modelled: other resources, stdin/tty and resize in exec, the old ``channel.k8s.io``
protocol, scheduling constraints (nodeSelector and runtimeClassName are stored, never enforced),
restarts, image pulls, admission, and output streaming (an exec's output is sent when the command
ends). Every pod runs in a container of `rtax.substrates.docker.DockerSubstrate` named
``kubernetes-emulation``, so commands really run and the reaper can find orphans.

Faults are injected from Python: `inject` answers an operation with an HTTP error (e.g. 429 with
``Retry-After``, 403, 422, 500) and `delay` answers late after doing the work (a lost answer;
for ``exec`` the upgrade request is accepted on its TCP connection and never answered, then
dropped after the delay); `hold_scheduling` leaves new pods Pending and unscheduled until
`release_scheduling` (an orchestration that never ends). `stop()` waits for the kubelet's
background work and removes every container the emulation made, including those whose pods
were deleted and are still being removed.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import json
import logging
import re
import shlex
import socket
import threading
import time
import uuid
from collections import deque
from collections.abc import AsyncIterator, Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from rtax.emulation import LoopbackServer
from rtax.image import RUNNER_IMAGE

#: What the emulation's backing containers are labelled with (rtax.substrate=...).
BACKING_NAME = "kubernetes-emulation"
NODE_NAME = "rtax-emulated-node"
#: How many watch events are kept; a watch from an older resourceVersion gets 410 Gone.
HISTORY = 10_000
#: An exec has no timeout of its own in Kubernetes; this only bounds a forgotten command.
_EXEC_LIMIT_S = 24 * 3600.0
_CHUNK = 32 * 1024
_PROTOCOLS = ("v5.channel.k8s.io", "v4.channel.k8s.io")
_NAME_RE = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
_LABEL_NAME_RE = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]$")


def _now() -> str:
    """A metav1.Time: RFC 3339 in UTC, whole seconds (what the API server serialises)."""
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


# -- validation and selectors (as the API server does them) ---------------------------------------


def _label_key_errors(key: str) -> list[str]:
    prefix, _, name = key.rpartition("/")
    errors = []
    if prefix and (len(prefix) > 253 or not _NAME_RE.match(prefix)):
        errors.append(f"prefix part {prefix!r} must be a lowercase RFC 1123 subdomain")
    if not name or len(name) > 63 or not _LABEL_NAME_RE.match(name):
        errors.append(
            f"name part {name!r} must consist of alphanumeric characters, '-', '_' or '.', "
            "and must start and end with an alphanumeric character (at most 63)"
        )
    return errors


def _label_value_errors(value: Any) -> list[str]:
    if not isinstance(value, str):
        return ["must be a string"]
    if value and (len(value) > 63 or not _LABEL_NAME_RE.match(value)):
        return [
            "a valid label must be an empty string or consist of alphanumeric characters, "
            "'-', '_' or '.', and must start and end with an alphanumeric character (at most 63)"
        ]
    return []


def _validate_pod(pod: dict[str, Any]) -> list[dict[str, str]]:
    """Field errors of a pod as the API server reports them (an empty list: valid)."""
    causes: list[dict[str, str]] = []

    def bad(field: str, value: Any, why: str) -> None:
        message = f"Invalid value: {json.dumps(value)}: {why}"
        causes.append({"reason": "FieldValueInvalid", "message": message, "field": field})

    meta = pod.get("metadata") or {}
    name = meta.get("name") or ""
    if not name:
        causes.append(
            {"reason": "FieldValueRequired", "message": "Required value", "field": "metadata.name"}
        )
    elif len(name) > 253 or not _NAME_RE.match(name):
        bad(
            "metadata.name",
            name,
            "a lowercase RFC 1123 subdomain must consist of lower case "
            "alphanumeric characters, '-' or '.'",
        )
    for key, value in (meta.get("labels") or {}).items():
        for why in _label_key_errors(key):
            bad("metadata.labels", key, why)
        for why in _label_value_errors(value):
            bad("metadata.labels", value, why)
    for key in meta.get("annotations") or {}:
        for why in _label_key_errors(key):
            bad("metadata.annotations", key, why)
    containers = (pod.get("spec") or {}).get("containers") or []
    if not containers:
        causes.append(
            {
                "reason": "FieldValueRequired",
                "message": "Required value",
                "field": "spec.containers",
            }
        )
    for i, c in enumerate(containers):
        for field in ("name", "image"):
            if not c.get(field):
                causes.append(
                    {
                        "reason": "FieldValueRequired",
                        "message": "Required value",
                        "field": f"spec.containers[{i}].{field}",
                    }
                )
    return causes


def _split_terms(selector: str) -> list[str]:
    """Split a selector on the commas that are not inside parentheses."""
    terms, depth, cur = [], 0, ""
    for ch in selector:
        depth += ch == "("
        depth -= ch == ")"
        if ch == "," and depth == 0:
            terms.append(cur.strip())
            cur = ""
        else:
            cur += ch
    if cur.strip():
        terms.append(cur.strip())
    return terms


_SET_TERM = re.compile(r"^(\S+)\s+(in|notin)\s+\(([^)]*)\)$")


def label_matcher(selector: str | None) -> Callable[[dict[str, str]], bool]:
    """A predicate over labels for a labelSelector (=, ==, !=, in, notin, exists, !exists).

    Raises ValueError on a malformed selector (the API server answers 400)."""
    checks: list[Callable[[dict[str, str]], bool]] = []
    for term in _split_terms(selector or ""):
        if m := _SET_TERM.match(term):
            key, op, values = m.group(1), m.group(2), {v.strip() for v in m.group(3).split(",")}
            if op == "in":
                checks.append(lambda lb, k=key, vs=values: lb.get(k) in vs)
            else:
                checks.append(lambda lb, k=key, vs=values: lb.get(k) not in vs)
        elif "!=" in term:
            key, value = (s.strip() for s in term.split("!=", 1))
            checks.append(lambda lb, k=key, v=value: lb.get(k) != v)
        elif "=" in term:
            key, value = (s.strip() for s in re.split("==?", term, maxsplit=1))
            checks.append(lambda lb, k=key, v=value: lb.get(k) == v)
        elif term.startswith("!"):
            absent = term[1:].strip()
            checks.append(lambda lb, k=absent: k not in lb)
        else:
            checks.append(lambda lb, k=term: k in lb)
        key = re.split(r"[\s=!]", term.lstrip("!"), maxsplit=1)[0]
        if _label_key_errors(key):
            raise ValueError(f"unable to parse requirement: invalid label key {key!r}")
    return lambda labels: all(check(labels) for check in checks)


def field_matcher(selector: str | None) -> Callable[[dict[str, Any]], bool]:
    """A predicate over an object for a fieldSelector of dotted paths (=, ==, !=)."""
    checks = []
    for term in _split_terms(selector or ""):
        negate = "!=" in term
        path, value = (s.strip() for s in re.split("!=|==?", term, maxsplit=1))
        if not path or "=" not in term:
            raise ValueError(f"invalid field selector term {term!r}")
        checks.append((path.split("."), value, negate))

    def match(obj: dict[str, Any]) -> bool:
        for parts, value, negate in checks:
            cur: Any = obj
            for part in parts:
                cur = cur.get(part) if isinstance(cur, dict) else None
            if (str(cur if cur is not None else "") == value) == negate:
                return False
        return True

    return match


def status_body(code: int, reason: str, message: str, **details: Any) -> dict[str, Any]:
    """A v1 Status, the body of every API error."""
    body: dict[str, Any] = {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
        "code": code,
    }
    if details:
        body["details"] = details
    return body


# -- the state: objects, resourceVersion, watch history -------------------------------------------


@dataclass
class _Fault:
    status: int
    times: int
    retry_after: int | None
    message: str


class _State:
    """Pods and events with one resourceVersion counter and a bounded watch history.

    Written from the server's loop and from kubelet threads, under one lock; watchers (async, on
    the server's loop) are woken with `call_soon_threadsafe`."""

    def __init__(self) -> None:
        self.lock = threading.RLock()
        self.rv = 0
        self.objects: dict[str, dict[tuple[str, str], dict[str, Any]]] = {"pods": {}, "events": {}}
        self.history: deque[tuple[int, str, str, dict[str, Any]]] = deque(maxlen=HISTORY)
        self.waiters: set[asyncio.Event] = set()
        self.loop: asyncio.AbstractEventLoop | None = None
        self.closed = False

    def commit(self, resource: str, kind: str, obj: dict[str, Any]) -> dict[str, Any]:
        """Store `obj` (or drop it for DELETED) at a new resourceVersion and wake watchers."""
        with self.lock:
            self.rv += 1
            obj["metadata"]["resourceVersion"] = str(self.rv)
            key = (obj["metadata"]["namespace"], obj["metadata"]["name"])
            if kind == "DELETED":
                self.objects[resource].pop(key, None)
            else:
                self.objects[resource][key] = obj
            snapshot = copy.deepcopy(obj)
            self.history.append((self.rv, resource, kind, snapshot))
            self.wake()
            return snapshot

    def wake(self) -> None:
        loop = self.loop
        if loop is None or loop.is_closed():
            return
        for event in list(self.waiters):
            with contextlib.suppress(RuntimeError):  # the loop is closing
                loop.call_soon_threadsafe(event.set)

    def get(self, resource: str, ns: str, name: str) -> dict[str, Any] | None:
        with self.lock:
            obj = self.objects[resource].get((ns, name))
            return copy.deepcopy(obj) if obj is not None else None

    def update(
        self, ns: str, name: str, change: Callable[[dict[str, Any]], None]
    ) -> dict[str, Any] | None:
        """Apply `change` to a live pod and commit it as MODIFIED (None if the pod is gone)."""
        with self.lock:
            pod = self.objects["pods"].get((ns, name))
            if pod is None:
                return None
            pod = copy.deepcopy(pod)
            change(pod)
            return self.commit("pods", "MODIFIED", pod)


def _with_kind(resource: str, obj: dict[str, Any]) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod" if resource == "pods" else "Event", **obj}


# -- the emulation ---------------------------------------------------------------------------------


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
        self.backoff_after_s = backoff_after_s
        self.state = _State()
        self._faults: dict[str, list[_Fault]] = {}
        self._delays: dict[str, list[float]] = {}
        self._backing: dict[str, Any] = {}
        self._envs: dict[str, Any] = {}  # pod uid -> backing Environment
        self._made: set[str] = set()  # run ids of the backing containers
        self._pod_locks: dict[str, threading.Lock] = {}
        self._lock = threading.Lock()
        self._schedulable = threading.Event()
        self._schedulable.set()
        self._kubelet: ThreadPoolExecutor | None = None
        self._server: Any = None
        self._thread: threading.Thread | None = None
        #: the subprotocol of every exec, in order (tests check the negotiation)
        self.exec_protocols: list[str] = []
        self.requests: list[tuple[str, str]] = []  # (method, path) of every request

    # -- life ------------------------------------------------------------------------------------

    def start(self) -> None:
        """Reap the backing containers of a dead process, then serve; return once serving."""
        import uvicorn

        from rtax import reaper

        if self._thread is not None:
            return
        reaper.reap([self._docker(self.image)])
        self._kubelet = ThreadPoolExecutor(max_workers=32, thread_name_prefix="k8s-kubelet")
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("127.0.0.1", self.port))
        self.port = sock.getsockname()[1]
        config = uvicorn.Config(
            self._app(),
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
            self.state.wake()
            self._server.should_exit = True
            self._thread.join(timeout=30)
            self._thread = None
        self._schedulable.set()  # a held scheduler lets its pods go (they are gone or ignored)
        if self._kubelet is not None:
            # Background container removals still queued are cancelled: their containers are
            # still in `_envs` and are removed below; the running ones are waited for.
            self._kubelet.shutdown(wait=True, cancel_futures=True)
            self._kubelet = None
        for env in list(self._envs.values()):
            with contextlib.suppress(Exception):
                self._docker(self.image).destroy(env, 60)
        self._envs.clear()
        # Backstop: any other container this emulation made (one label for every image).
        sub = self._docker(self.image)
        for leftover in sub.leftovers():
            if leftover.run_id in self._made:
                sub.remove_leftover(leftover)

    def substrate_params(self) -> dict[str, Any]:
        """Point a `kubernetes` substrate here: a direct API URL, no TLS, no credential unless
        this emulation requires its (fake) token, which is then passed by environment name."""
        params: dict[str, Any] = {
            "host": self.url,
            "image": self.image,
            "fidelity": "emulated",
            "host_address": self._docker(self.image).host_address(),
        }
        return params

    # -- fault injection -------------------------------------------------------------------------

    def inject(
        self,
        op: str,
        status: int,
        times: int = 1,
        retry_after: int | None = None,
        message: str | None = None,
    ) -> None:
        """Answer the next `times` requests of `op` (create, get, list, watch, delete, exec,
        events) with HTTP `status` (and ``Retry-After`` when given) without doing anything."""
        fault = _Fault(status, times, retry_after, message or f"injected {status} on {op}")
        with self._lock:
            self._faults.setdefault(op, []).append(fault)

    def delay(self, op: str, seconds: float, times: int = 1) -> None:
        """Answer the next `times` requests of `op` `seconds` late, after doing the work (the
        client may give up while the server already acted, as with a lost answer)."""
        with self._lock:
            self._delays.setdefault(op, []).extend([seconds] * times)

    def clear_faults(self) -> None:
        with self._lock:
            self._faults.clear()
            self._delays.clear()
        self._schedulable.set()

    def _fault(self, op: str) -> _Fault | None:
        with self._lock:
            queue = self._faults.get(op) or []
            if not queue:
                return None
            fault = queue[0]
            fault.times -= 1
            if fault.times <= 0:
                queue.pop(0)
            return fault

    async def _late(self, op: str) -> bool:
        """Sleep the next delay queued for `op` (ended early when the server stops); True if
        there was one."""
        with self._lock:
            queue = self._delays.get(op) or []
            seconds = queue.pop(0) if queue else 0.0
        if not seconds:
            return False
        deadline = time.monotonic() + seconds
        while not self.state.closed and time.monotonic() < deadline:
            await asyncio.sleep(min(0.05, max(deadline - time.monotonic(), 0)))
        return True

    def hold_scheduling(self) -> None:
        """Leave new pods Pending and unscheduled (PodScheduled False, ``Unschedulable``, as
        when no node fits) until `release_scheduling` or `clear_faults`."""
        self._schedulable.clear()

    def release_scheduling(self) -> None:
        self._schedulable.set()

    # -- inspection for tests --------------------------------------------------------------------

    def pod(self, name: str, namespace: str = "default") -> dict[str, Any] | None:
        return self.state.get("pods", namespace, name)

    def container_of(self, name: str, namespace: str = "default") -> str | None:
        """The id of the Docker container backing a pod, or None."""
        pod = self.pod(name, namespace)
        env = self._envs.get(pod["metadata"]["uid"]) if pod else None
        return env.env_id if env else None

    # -- backing containers (the kubelet's runtime) ------------------------------------------------

    def _docker(self, image: str, cpus: float | None = 1.0, memory: int | None = None) -> Any:
        from rtax.substrates.docker import DockerSubstrate

        key = f"{image}|{cpus}|{memory}"
        with self._lock:
            if key not in self._backing:
                self._backing[key] = DockerSubstrate(
                    name=BACKING_NAME, image=image, cpus=cpus, memory=memory or "1g"
                )
            return self._backing[key]

    def _pod_lock(self, uid: str) -> threading.Lock:
        with self._lock:
            return self._pod_locks.setdefault(uid, threading.Lock())

    def _event(self, pod: dict[str, Any], reason: str, message: str, kind: str = "Normal") -> None:
        meta = pod["metadata"]
        now = _now()
        component = "default-scheduler" if reason == "Scheduled" else "kubelet"
        event = {
            "metadata": {
                "name": f"{meta['name']}.{uuid.uuid4().hex[:16]}",
                "namespace": meta["namespace"],
                "uid": str(uuid.uuid4()),
                "creationTimestamp": now,
            },
            "involvedObject": {
                "kind": "Pod",
                "namespace": meta["namespace"],
                "name": meta["name"],
                "uid": meta["uid"],
                "apiVersion": "v1",
                "resourceVersion": meta.get("resourceVersion"),
                **({} if reason == "Scheduled" else {"fieldPath": "spec.containers{main}"}),
            },
            "reason": reason,
            "message": message,
            "source": {"component": component, "host": NODE_NAME},
            "firstTimestamp": now,
            "lastTimestamp": now,
            "count": 1,
            "type": kind,
            "eventTime": None,
            "reportingComponent": component,
            "reportingInstance": NODE_NAME,
        }
        self.state.commit("events", "ADDED", event)

    def _run_pod(self, ns: str, name: str) -> None:
        """The scheduler and kubelet for one pod: Pending -> Running, as the real ones report."""
        pod = self.state.get("pods", ns, name)
        if pod is None:
            return
        uid = pod["metadata"]["uid"]
        if not self._schedulable.is_set():

            def unschedulable(p: dict[str, Any]) -> None:
                cond = _condition("PodScheduled", "False", "Unschedulable")
                cond["message"] = "0/1 nodes are available: scheduling held by the emulation."
                p["status"]["conditions"] = [cond]

            self.state.update(ns, name, unschedulable)
            while not self._schedulable.wait(0.1) and not self.state.closed:
                pass
            pod = self.state.get("pods", ns, name)
            if pod is None or pod["metadata"]["uid"] != uid or self.state.closed:
                return
        with self._pod_lock(uid):
            if pod["metadata"].get("deletionTimestamp") or pod["spec"].get("nodeName"):
                return  # being deleted, or already bound

            def scheduled(p: dict[str, Any]) -> None:
                p["spec"]["nodeName"] = NODE_NAME
                p["status"]["conditions"] = [_condition("PodScheduled")]

            pod = self.state.update(ns, name, scheduled)
            if pod is None:
                return
            self._event(pod, "Scheduled", f"Successfully assigned {ns}/{name} to {NODE_NAME}")
            container = pod["spec"]["containers"][0]
            image = container["image"]
            limits = (container.get("resources") or {}).get("limits") or {}
            sub = self._docker(image, _cpus(limits.get("cpu")), _bytes(limits.get("memory")))

            def admitted(p: dict[str, Any]) -> None:
                st = p["status"]
                st["hostIP"] = "127.0.0.1"
                st["startTime"] = _now()
                st["conditions"] = [
                    _condition("PodReadyToStartContainers"),
                    _condition("Initialized"),
                    _condition("Ready", "False", "ContainersNotReady"),
                    _condition("ContainersReady", "False", "ContainersNotReady"),
                    *st["conditions"],
                ]
                st["containerStatuses"] = [
                    _container_status(container, {"waiting": {"reason": "ContainerCreating"}})
                ]

            pod = self.state.update(ns, name, admitted)
            if pod is None:
                return
            try:
                sub.api.inspect_image(image)
            except Exception:
                self._image_pull_failed(ns, name, container)
                return
            self._event(pod, "Pulled", f'Container image "{image}" already present on machine')
            try:
                self._made.add(f"k8s-{uid}")
                env = sub.create(f"k8s-{uid}")
                self._envs[uid] = env
                self._event(pod, "Created", "Created container: main")
                sub.wait_running(env, 120)
            except Exception as exc:
                self._waiting(ns, name, container, "CreateContainerError", str(exc)[:200])
                self._event(pod, "Failed", f"Error: {exc}"[:200], "Warning")
                return
            self._event(pod, "Started", "Started container main")
            ip = sub.api.inspect_container(env.env_id)["NetworkSettings"].get("IPAddress")

            def running(p: dict[str, Any]) -> None:
                st = p["status"]
                st["phase"] = "Running"
                st["podIP"] = ip or "127.0.0.1"
                st["podIPs"] = [{"ip": st["podIP"]}]
                for c in st["conditions"]:
                    if c["type"] in ("Ready", "ContainersReady"):
                        c.update(_condition(c["type"]))
                state = {"running": {"startedAt": _now()}}
                st["containerStatuses"] = [
                    _container_status(container, state, ready=True, started=True, cid=env.env_id)
                ]

            self.state.update(ns, name, running)

    def _waiting(
        self, ns: str, name: str, container: dict[str, Any], reason: str, message: str
    ) -> dict[str, Any] | None:
        state = {"waiting": {"reason": reason, "message": message}}
        return self.state.update(
            ns,
            name,
            lambda p: p["status"].__setitem__(
                "containerStatuses", [_container_status(container, state)]
            ),
        )

    def _image_pull_failed(self, ns: str, name: str, container: dict[str, Any]) -> None:
        """A missing image: ErrImagePull, then (after the kubelet's first back-off)
        ImagePullBackOff; the pod stays Pending, as on a real node."""
        image = container["image"]
        message = (
            f'Failed to pull image "{image}": rpc error: code = NotFound desc = '
            f"failed to pull and unpack image: not found"
        )
        pod = self._waiting(ns, name, container, "ErrImagePull", message)
        if pod is None:
            return
        self._event(pod, "Pulling", f'Pulling image "{image}"')
        self._event(pod, "Failed", message, "Warning")
        self._event(pod, "Failed", "Error: ErrImagePull", "Warning")
        time.sleep(self.backoff_after_s)  # the kubelet's back-off before it reports it
        back_off = f'Back-off pulling image "{image}"'
        pod = self._waiting(ns, name, container, "ImagePullBackOff", back_off)
        if pod is not None:
            self._event(pod, "BackOff", back_off, "Normal")
            self._event(pod, "Failed", "Error: ImagePullBackOff", "Warning")

    def _terminate(self, ns: str, name: str, uid: str, last: dict[str, Any]) -> None:
        """The kubelet's part of a deletion: kill and remove the pod's container, then drop
        the object (DELETED) if it is still there (a terminating pod; a pod deleted with grace
        period 0 is already gone from the API)."""
        with self._pod_lock(uid):
            env = self._envs.pop(uid, None)
            if env is not None:
                self._event(last, "Killing", "Stopping container main")
                for _ in range(3):
                    try:
                        self._docker(self.image).destroy(env, 60)
                        break
                    except Exception:
                        continue
            with self.state.lock:
                pod = self.state.objects["pods"].get((ns, name))
                if pod is not None and pod["metadata"]["uid"] == uid:
                    self.state.commit("pods", "DELETED", copy.deepcopy(pod))

    # -- HTTP ------------------------------------------------------------------------------------

    def _app(self) -> Any:
        from starlette.applications import Starlette
        from starlette.routing import Route, WebSocketRoute

        pods = "/api/v1/namespaces/{ns}/pods"
        return Starlette(
            routes=[
                Route("/version", self._version),
                Route("/version/", self._version),  # where the Python client asks
                Route("/api/v1/namespaces/{ns}/events", self._list_events),
                Route(pods, self._pods, methods=["GET", "POST"]),
                Route(pods + "/{name}", self._pod, methods=["GET", "DELETE"]),
                Route(pods + "/{name}/exec", self._exec_no_upgrade, methods=["GET", "POST"]),
                WebSocketRoute(pods + "/{name}/exec", self._exec),
            ]
        )

    def _deny(self, request: Any, op: str) -> Any:
        """The response for an unauthenticated request or an injected fault, else None."""
        from starlette.responses import JSONResponse

        self.requests.append((request.scope.get("method", "WS"), request.url.path))
        auth = request.headers.get("authorization")
        if self.token is not None and auth != f"Bearer {self.token}":
            return JSONResponse(status_body(401, "Unauthorized", "Unauthorized"), 401)
        fault = self._fault(op)
        if fault is None:
            return None
        reasons = {403: "Forbidden", 422: "Invalid", 429: "TooManyRequests", 500: "InternalError"}
        headers = {"Retry-After": str(fault.retry_after)} if fault.retry_after is not None else {}
        body = status_body(fault.status, reasons.get(fault.status, "Unknown"), fault.message)
        if fault.retry_after is not None:
            body["details"] = {"retryAfterSeconds": fault.retry_after}
        return JSONResponse(body, fault.status, headers=headers)

    async def _version(self, request: Any) -> Any:
        from starlette.responses import JSONResponse

        if denied := self._deny(request, "version"):
            return denied
        return JSONResponse(
            {
                "major": "1",
                "minor": "33",
                "gitVersion": "v1.33.0-rtax-emulated",
                "platform": "linux/amd64",
            }
        )

    async def _pods(self, request: Any) -> Any:
        if request.method == "POST":
            return await self._create(request)
        return await self._list(request, "pods")

    async def _list_events(self, request: Any) -> Any:
        return await self._list(request, "events")

    async def _create(self, request: Any) -> Any:
        from starlette.responses import JSONResponse

        if denied := self._deny(request, "create"):
            return denied
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
        if causes := _validate_pod(pod):
            message = f'Pod "{name}" is invalid: ' + "; ".join(
                f"{c['field']}: {c['message']}" for c in causes
            )
            body = status_body(422, "Invalid", message, name=name, kind="Pod", causes=causes)
            return JSONResponse(body, 422)
        meta = pod["metadata"]
        meta.update(
            namespace=ns,
            uid=str(uuid.uuid4()),
            creationTimestamp=_now(),
            generation=1,
        )
        spec = pod.setdefault("spec", {})
        spec.setdefault("restartPolicy", "Always")
        spec.setdefault("schedulerName", "default-scheduler")
        spec.setdefault("dnsPolicy", "ClusterFirst")
        pod["status"] = {"phase": "Pending", "qosClass": _qos(spec)}
        pod.pop("kind", None)
        pod.pop("apiVersion", None)
        with self.state.lock:
            if (ns, name) in self.state.objects["pods"]:
                body = status_body(
                    409, "AlreadyExists", f'pods "{name}" already exists', name=name, kind="pods"
                )
                return JSONResponse(body, 409)
            created = self.state.commit("pods", "ADDED", pod)
        assert self._kubelet is not None
        self._kubelet.submit(self._run_pod, ns, name)
        await self._late("create")
        return JSONResponse(_with_kind("pods", created), 201)

    async def _pod(self, request: Any) -> Any:
        from starlette.responses import JSONResponse

        op = "get" if request.method == "GET" else "delete"
        if denied := self._deny(request, op):
            return denied
        ns, name = request.path_params["ns"], request.path_params["name"]
        pod = self.state.get("pods", ns, name)
        if pod is None:
            body = status_body(404, "NotFound", f'pods "{name}" not found', name=name, kind="pods")
            return JSONResponse(body, 404)
        if op == "delete":
            try:
                grace = _grace_period(request.query_params, await request.body(), pod)
            except ValueError as exc:
                return JSONResponse(status_body(400, "BadRequest", str(exc)), 400)
            pod = self._delete(ns, name, pod, grace)
            await self._late("delete")
        return JSONResponse(_with_kind("pods", pod))

    def _delete(self, ns: str, name: str, pod: dict[str, Any], grace: int) -> dict[str, Any]:
        """As the API server deletes a pod: with grace period 0, or when no node has it yet,
        the object goes at once (DELETED) and the kubelet stops the container afterwards; with
        a grace period the pod is marked terminating and goes once its container is removed."""
        uid = pod["metadata"]["uid"]

        def deleting(p: dict[str, Any]) -> None:
            p["metadata"].setdefault("deletionTimestamp", _now())
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
        assert self._kubelet is not None
        self._kubelet.submit(self._terminate, ns, name, uid, pod)
        return pod

    async def _list(self, request: Any, resource: str) -> Any:
        from starlette.responses import JSONResponse, StreamingResponse

        q = request.query_params
        watching = _true(q.get("watch"))
        op = "watch" if watching else ("events" if resource == "events" else "list")
        if denied := self._deny(request, op):
            return denied
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
            stream = self._watch(resource, matches, since, timeout)
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

    async def _watch(
        self,
        resource: str,
        matches: Callable[[dict[str, Any]], bool],
        since: str | None,
        timeout_s: float,
    ) -> AsyncIterator[bytes]:
        """Events after `since` as JSON lines; from "now" (after synthetic ADDED events of the
        current state) when `since` is empty or "0"; 410 Gone when `since` is compacted away."""
        state = self.state
        wake = asyncio.Event()
        state.loop = asyncio.get_running_loop()
        state.waiters.add(wake)
        deadline = time.monotonic() + timeout_s
        try:
            with state.lock:
                if not since or since == "0":
                    last = state.rv
                    backlog = [
                        {"type": "ADDED", "object": _with_kind(resource, copy.deepcopy(o))}
                        for o in state.objects[resource].values()
                        if matches(o)
                    ]
                else:
                    try:
                        last = int(since)
                    except ValueError:
                        last = -1
                    # events after `last` were dropped when the history lost the one after it
                    oldest = state.history[0][0] if state.history else state.rv + 1
                    if last < 0 or last < oldest - 1:
                        gone = status_body(
                            410, "Expired", f"too old resource version: {since} ({oldest - 1})"
                        )
                        backlog, last = [{"type": "ERROR", "object": gone}], None
                    else:
                        backlog = []
            for event in backlog:
                yield (json.dumps(event) + "\n").encode()
            if last is None:
                return
            while not state.closed:
                wake.clear()
                with state.lock:
                    fresh = [h for h in state.history if h[0] > last]
                    if fresh:
                        last = fresh[-1][0]
                for _, res, kind, obj in fresh:
                    if res == resource and matches(obj):
                        event = {"type": kind, "object": _with_kind(resource, obj)}
                        yield (json.dumps(event) + "\n").encode()
                left = deadline - time.monotonic()
                if left <= 0:
                    return
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(wake.wait(), left)
        finally:
            state.waiters.discard(wake)

    async def _exec_no_upgrade(self, request: Any) -> Any:
        from starlette.responses import JSONResponse

        message = "Upgrade request required"
        return JSONResponse(status_body(400, "BadRequest", message), 400)

    async def _exec(self, ws: Any) -> None:
        """One command over a v4/v5 channel WebSocket, run in the pod's real container."""
        from starlette.concurrency import run_in_threadpool
        from starlette.responses import JSONResponse

        async def deny(code: int, reason: str, message: str) -> None:
            await ws.send_denial_response(JSONResponse(status_body(code, reason, message), code))

        if denied := self._deny(ws, "exec"):
            await ws.send_denial_response(denied)
            return
        if await self._late("exec"):  # an upgrade request held with no answer, then dropped
            with contextlib.suppress(Exception):
                await ws.close()
            return
        ns, name = ws.path_params["ns"], ws.path_params["name"]
        pod = self.state.get("pods", ns, name)
        if pod is None:
            await deny(404, "NotFound", f'pods "{name}" not found')
            return
        command = ws.query_params.getlist("command")
        env = self._envs.get(pod["metadata"]["uid"])
        if not command:
            await deny(400, "BadRequest", "you must specify at least 1 command")
            return
        if _true(ws.query_params.get("stdin")) or _true(ws.query_params.get("tty")):
            await deny(400, "BadRequest", "stdin and tty are not supported by this emulation")
            return
        if env is None or pod["status"].get("phase") != "Running":
            phase = pod["status"].get("phase")
            await deny(
                400,
                "BadRequest",
                f'container "main" in pod "{name}" is not running (phase {phase})',
            )
            return
        offered = ws.scope.get("subprotocols") or []
        chosen = next((p for p in offered if p in _PROTOCOLS), None)
        if chosen is None:
            await deny(400, "BadRequest", f"no supported subprotocol in {offered}")
            return
        self.exec_protocols.append(chosen)
        await ws.accept(subprotocol=chosen)
        sub = self._docker(self.image)
        try:
            result = await run_in_threadpool(sub.run, env, shlex.join(command), _EXEC_LIMIT_S)
        except Exception as exc:
            status = status_body(500, "InternalError", f"error executing command: {exc}")
            await ws.send_bytes(b"\x03" + json.dumps(status).encode())
            await ws.close()
            return
        for channel, text in ((1, result.stdout), (2, result.stderr)):
            data = text.encode("utf-8", "surrogateescape")
            for i in range(0, len(data), _CHUNK):
                await ws.send_bytes(bytes([channel]) + data[i : i + _CHUNK])
        if result.exit_code == 0:
            status = {"metadata": {}, "status": "Success"}
        else:
            status = {
                "metadata": {},
                "status": "Failure",
                "message": (
                    "command terminated with non-zero exit code: error executing command "
                    f"{command}, exit code {result.exit_code}"
                ),
                "reason": "NonZeroExitCode",
                "details": {"causes": [{"reason": "ExitCode", "message": str(result.exit_code)}]},
            }
        await ws.send_bytes(b"\x03" + json.dumps(status).encode())
        await ws.close()


def _denial_is_complete(record: logging.LogRecord) -> bool:
    """Drop uvicorn's false alarm after a WebSocket denial response (an HTTP error answered
    instead of the upgrade, as the API server does): its sans-I/O protocol sent the response
    but does not count it as a completed handshake."""
    return record.getMessage() != "ASGI callable returned without completing handshake."


def _grace_period(query: Any, body: bytes, pod: dict[str, Any]) -> int:
    """A deletion's grace period as the API server picks it: DeleteOptions in the body, then
    the ``gracePeriodSeconds`` query parameter, then the pod's terminationGracePeriodSeconds
    (default 30)."""
    options = json.loads(body) if body.strip() else {}
    value = (options or {}).get("gracePeriodSeconds")
    if value is None:
        value = query.get("gracePeriodSeconds")
    if value is None:
        value = pod["spec"].get("terminationGracePeriodSeconds", 30)
    grace = int(value)
    if grace < 0:
        raise ValueError("gracePeriodSeconds must be >= 0")
    return grace


def _true(value: str | None) -> bool:
    """A boolean query parameter as Go's strconv.ParseBool reads it (the client sends "True")."""
    return value in ("1", "t", "T", "true", "TRUE", "True")


def _condition(kind: str, status: str = "True", reason: str | None = None) -> dict[str, Any]:
    cond: dict[str, Any] = {
        "type": kind,
        "status": status,
        "lastProbeTime": None,
        "lastTransitionTime": _now(),
    }
    if reason:
        cond["reason"] = reason
    return cond


def _container_status(
    container: dict[str, Any],
    state: dict[str, Any],
    *,
    ready: bool = False,
    started: bool = False,
    cid: str | None = None,
) -> dict[str, Any]:
    status: dict[str, Any] = {
        "name": container["name"],
        "image": container["image"],
        "imageID": "",
        "ready": ready,
        "started": started,
        "restartCount": 0,
        "state": state,
    }
    if cid:
        status["containerID"] = f"docker://{cid}"
    return status


def _qos(spec: dict[str, Any]) -> str:
    res = [(c.get("resources") or {}) for c in spec.get("containers") or []]
    if not any(r.get("requests") or r.get("limits") for r in res):
        return "BestEffort"
    guaranteed = all(
        r.get("limits")
        and {k: r["limits"].get(k) for k in ("cpu", "memory")}
        == {k: (r.get("requests") or r["limits"]).get(k) for k in ("cpu", "memory")}
        for r in res
    )
    return "Guaranteed" if guaranteed else "Burstable"


def _cpus(quantity: Any) -> float | None:
    """A CPU quantity ("500m", "2") as a number of CPUs."""
    if quantity in (None, ""):
        return None
    text = str(quantity)
    return float(text[:-1]) / 1000 if text.endswith("m") else float(text)


_UNITS = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "k": 10**3, "M": 10**6, "G": 10**9}


def _bytes(quantity: Any) -> int | None:
    """A memory quantity ("1Gi", "512M", "1000") in bytes."""
    if quantity in (None, ""):
        return None
    text = str(quantity)
    for unit, factor in _UNITS.items():
        if text.endswith(unit):
            return int(float(text[: -len(unit)]) * factor)
    return int(float(text))
