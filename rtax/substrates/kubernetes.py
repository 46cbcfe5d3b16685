"""The `kubernetes` substrate: one Pod per rollout, through the official Kubernetes client.

Why these choices (docs/substrates/kubernetes.md):

- One ``POST`` of a Pod is the create phase; orchestration is Pending -> Running as a *watch*
  started from the resourceVersion the create returned reports it, so no transition is missed
  and no polling interval is measured. Conditions (PodScheduled, Initialized, ContainersReady,
  Ready) are marked as native milestones when the watch shows them, and a second watch on the
  pod's events marks image pulled / container created / started when the kubelet reports them.
  The Ready condition is the milestone ``pod_ready`` (``ready`` is a phase: the first command).
  Milestones are times at which this host *observed* the report, on the rtax clock.
- Commands run through the exec WebSocket (``v5.channel.k8s.io``/``v4.channel.k8s.io``) as
  ``timeout -k 1 <t> sh -c <cmd>``: coreutils stops a hung command inside the pod. The client
  connects its WebSocket with no timeout at all (``_request_timeout`` only bounds a preloaded
  read), so rtax gives the TCP connect and the upgrade handshake a socket timeout
  (``api_timeout_s``, within the command's budget) and bounds every frame read by the command's
  deadline, so a silent API cannot hang a rollout: no answer to the upgrade is ``exec_error``
  (the command never started: nothing ran past a timeout), no exit status by the deadline,
  even within a half-received frame, is ``action_timeout`` as before.
  Exit codes come from the status channel's v1 Status; stdout and stderr stay apart.
- An exec refused for good (401, 403 and other 4xx but 400, 404, 408 and 429) is
  ``exec_error`` at once, even in the ready phase, whose other failures are retried until the
  ready timeout; a 404 for a pod that is gone is ``environment_lost``.
- Cleanup deletes with grace period 0 and then waits (a watch again) until the API no longer has
  the pod: at once when the API server removes it with the answer (force deletion, what a real
  one does with grace period 0), or when a terminating pod's DELETED event comes. The kubelet
  may still be killing the container then; that is not part of ``cleanup``.
- HTTP 429 (API priority and fairness) is retried with exponential backoff that honours
  ``Retry-After`` up to ``backoff_max_s``, bounded by ``max_attempts`` and the call's deadline;
  if it persists the rollout fails as ``rate_limited``.
- Classification: create refused (403, 409, 422, ...) -> ``create_failed``; no answer in time
  -> ``create_timeout`` / ``ready_timeout``; a container that can't start for good (image pull
  back-off, invalid image name, container config error) -> ``create_failed`` with the kubelet's
  reason, as the docker substrate does for a missing image; a pod that fails, is deleted or
  evicted under the rollout -> ``environment_lost``.
- Pods carry labels ``rtax``, ``rtax.run_id`` and ``rtax.substrate`` (label values must be
  short DNS-ish tokens) and annotations ``rtax.created_at`` / ``rtax.owner`` (an ISO time and
  "host:pid" are not valid label values), so that `rtax reap` finds orphans by label.
- Credentials come from a kubeconfig, the in-cluster service account, or a bearer `token`
  (in ``rtax.toml`` only as ``token_env = "VAR"``, which the scheduler resolves from the
  environment); they are kept only inside the client's configuration and
  never appear in `describe()`, messages or logs.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import re
import socket
import threading
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from importlib import metadata
from typing import Any

from rtax.image import RUNNER_IMAGE
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
    redacting,
)
from rtax.substrates.emulated import EmulationWatch

#: Exit status of coreutils `timeout` when it had to stop the command.
_TIMEOUT_EXIT = 124
_KILL_GRACE_S = 1.0
#: How long past a command's timeout the WebSocket is waited for before it is closed.
_WS_MARGIN_S = 10.0
CONTAINER = "main"
PROTOCOLS = {"v4": "v4.channel.k8s.io", "v5": "v5.channel.k8s.io"}
#: Waiting reasons after which a container will not start without a change of spec.
FATAL_WAITING = {
    "ImagePullBackOff",
    "InvalidImageName",
    "ErrImageNeverPull",
    "CreateContainerConfigError",
    "CreateContainerError",
}
_CONDITIONS = {
    "PodScheduled": "scheduled",
    "Initialized": "initialized",
    "ContainersReady": "containers_ready",
    "Ready": "pod_ready",  # not "ready": that is a phase of the measurement model
}
_EVENTS = {
    "Pulling": "image_pulling",
    "Pulled": "image_pulled",
    "Created": "container_created",
    "Started": "container_started",
}


def _k8s() -> Any:
    import kubernetes  # imported on first use: the registry stays cheap for other substrates

    return kubernetes


def _dns_token(text: str, limit: int = 63) -> str:
    """`text` as a DNS label / label value: lowercase alphanumerics and '-', at most `limit`."""
    token = re.sub(r"[^a-z0-9-]+", "-", text.lower()).strip("-")[:limit].strip("-")
    return token or "x"


class KubernetesSubstrate:
    """Pods from `image` in `namespace`, one per rollout, with resources, runtime class and node
    selector; reached through a kubeconfig (`kubeconfig`, `context`), the in-cluster service
    account (`in_cluster`), or a direct API URL (`host`, with `token`, `ca_cert`)."""

    kind = "kubernetes"
    mode = "exec"

    def __init__(
        self,
        name: str = "kubernetes",
        fidelity: str = "real",
        *,
        kubeconfig: str | None = None,
        context: str | None = None,
        in_cluster: bool = False,
        host: str | None = None,
        token: str | None = None,
        ca_cert: str | None = None,
        verify_ssl: bool = True,
        namespace: str = "default",
        image: str = RUNNER_IMAGE,
        image_pull_policy: str = "IfNotPresent",
        cpu: str | None = "1",
        memory: str | None = "1Gi",
        runtime_class_name: str | None = None,
        node_selector: dict[str, str] | None = None,
        working_dir: str = "/work",
        exec_protocol: str | None = None,
        watch_events: bool = True,
        host_address: str | None = None,
        api_timeout_s: float = 30.0,
        create_timeout_s: float = 120.0,
        max_attempts: int = 6,
        backoff_base_s: float = 0.2,
        backoff_max_s: float = 10.0,
    ) -> None:
        if fidelity not in FIDELITIES:
            raise ValueError(f"fidelity must be one of {', '.join(FIDELITIES)}, got {fidelity!r}")
        if exec_protocol is not None and exec_protocol not in PROTOCOLS:
            raise ValueError(f"exec_protocol must be v4, v5 or unset, got {exec_protocol!r}")
        self.name = name
        self._fidelity = fidelity
        #: an rtax emulation's answer makes the samples `emulated`, whatever was configured
        self.emulation = EmulationWatch()
        self.namespace = namespace
        self.image = image
        self.image_pull_policy = image_pull_policy
        self.cpu = cpu
        self.memory = memory
        self.runtime_class_name = runtime_class_name
        self.node_selector = dict(node_selector or {})
        self.working_dir = working_dir
        self.exec_protocol = exec_protocol
        self.watch_events = watch_events
        #: where a pod reaches this host: only the configuration knows
        self.host_address = host_address
        self.api_timeout_s = api_timeout_s
        self.create_timeout_s = create_timeout_s
        self.max_attempts = max_attempts
        self.backoff_base_s = backoff_base_s
        self.backoff_max_s = backoff_max_s
        self.context = context
        self.source = "host" if host else "in-cluster" if in_cluster else "kubeconfig"
        self._cfg = self._configuration(
            kubeconfig, context, in_cluster, host, token, ca_cert, verify_ssl
        )
        k8s = _k8s()
        self.api = k8s.client.CoreV1Api(k8s.client.ApiClient(self._cfg))
        self.emulation.watch_openapi(self.api.api_client)
        # `stream()` swaps its ApiClient's request method while it connects: one per thread.
        self._exec_clients = threading.local()
        self._owner = f"{socket.gethostname()}:{os.getpid()}"
        self._server_version: str | None = None

    @property
    def fidelity(self) -> str:
        return self.emulation.fidelity(self._fidelity)

    @staticmethod
    def _configuration(
        kubeconfig: str | None,
        context: str | None,
        in_cluster: bool,
        host: str | None,
        token: str | None,
        ca_cert: str | None,
        verify_ssl: bool,
    ) -> Any:
        """The client configuration; it alone holds the credentials."""
        k8s = _k8s()
        cfg = k8s.client.Configuration()
        if host:
            cfg.host = host.rstrip("/")
            if token:
                cfg.api_key = {"BearerToken": token}
                cfg.api_key_prefix = {"BearerToken": "Bearer"}
            cfg.ssl_ca_cert = ca_cert
            cfg.verify_ssl = verify_ssl
        elif in_cluster:
            k8s.config.load_incluster_config(client_configuration=cfg)
        else:
            try:
                k8s.config.load_kube_config(
                    config_file=kubeconfig, context=context, client_configuration=cfg
                )
            except (k8s.config.ConfigException, OSError) as exc:
                where = kubeconfig or os.environ.get("KUBECONFIG") or "~/.kube/config"
                raise SubstrateError(
                    f"no usable kubeconfig at {where} ({type(exc).__name__}); set kubeconfig, "
                    "context, in_cluster or host"
                ) from None
        cfg.retries = 0  # no silent retries inside a measured call: ours are explicit
        return cfg

    def _secrets(self) -> list[str]:
        """What `redacting` keeps out of every error message: the credentials the client
        configuration holds (a bearer token, with or without its prefix; a password)."""
        values = [str(v) for v in (self._cfg.api_key or {}).values() if v]
        values += [v.split(" ", 1)[1] for v in values if v.startswith("Bearer ")]
        if self._cfg.password:
            values.append(str(self._cfg.password))
        return values

    # -- calls: retries on 429, classification ---------------------------------------------------

    def _call(
        self,
        what: str,
        fn: Callable[[float], Any],
        *,
        fail: type[SubstrateError],
        slow: type[SubstrateError],
        timeout_s: float,
        missing_ok: bool = False,
        raw: bool = False,
    ) -> Any:
        """Call `fn(remaining_s)`; retry HTTP 429 with backoff; classify every other failure.

        Returns the parsed JSON body (None on 404 when `missing_ok`), or with `raw` the
        unread response (a watch stream; 410 Gone then raises `_Expired`)."""
        k8s = _k8s()
        deadline = clock() + timeout_s
        attempt = 0
        while True:
            attempt += 1
            try:
                resp = fn(max(deadline - clock(), 0.5))
                return resp if raw else json.loads(resp.data or b"null")
            except k8s.client.ApiException as exc:
                if exc.status == 404 and missing_ok:
                    return None
                if exc.status == 410 and raw:
                    raise _Expired() from None
                if exc.status == 429:
                    wait = self._backoff(attempt, exc)
                    if attempt >= self.max_attempts or clock() + wait > deadline:
                        raise RateLimited(
                            f"{what}: HTTP 429 {_status_message(exc)} after {attempt} attempts"
                        ) from None
                    time.sleep(wait)  # backing off, as the server asked
                    continue
                if exc.status == 0:
                    raise fail(f"{what}: {_reason(exc)}") from None
                raise fail(f"{what}: HTTP {exc.status} {_status_message(exc)}") from None
            except Exception as exc:
                if _is_timeout(exc):
                    raise slow(f"{what}: no answer within {timeout_s:g} s") from None
                if _is_transport(exc):
                    raise fail(f"{what}: API unreachable ({_transport_reason(exc)})") from None
                raise

    def _plain(self, what: str, fn: Callable[..., Any]) -> Any:
        """`fn(**request_options)` through `_call` within `api_timeout_s`, any failure a plain
        `SubstrateError` (listing, version: calls outside a rollout's phases)."""
        return self._call(
            what,
            lambda left: fn(_preload_content=False, _request_timeout=self._timeout(left)),
            fail=SubstrateError,
            slow=SubstrateError,
            timeout_s=self.api_timeout_s,
        )

    def _backoff(self, attempt: int, exc: Any) -> float:
        """Exponential backoff from `backoff_base_s`, or the server's Retry-After, capped."""
        wait = self.backoff_base_s * 2 ** (attempt - 1)
        retry_after = (exc.headers or {}).get("Retry-After") if exc.headers else None
        with contextlib.suppress(TypeError, ValueError):
            wait = max(wait, float(retry_after))
        return min(wait, self.backoff_max_s)

    def _timeout(self, seconds: float) -> tuple[float, float]:
        """The client's (connect, read) timeout for a call that may take `seconds`."""
        return (min(seconds, self.api_timeout_s), max(seconds, 0.5))

    # -- life of one environment ------------------------------------------------------------

    def _manifest(self, name: str, run_id: str) -> dict[str, Any]:
        resources: dict[str, str] = {}
        if self.cpu:
            resources["cpu"] = self.cpu
        if self.memory:
            resources["memory"] = self.memory
        spec: dict[str, Any] = {
            "restartPolicy": "Never",
            "terminationGracePeriodSeconds": 0,
            "automountServiceAccountToken": False,
            "enableServiceLinks": False,
            "containers": [
                {
                    "name": CONTAINER,
                    "image": self.image,
                    "imagePullPolicy": self.image_pull_policy,
                    "command": ["sleep", "infinity"],
                    "workingDir": self.working_dir,
                    "resources": {"requests": resources, "limits": resources},
                }
            ],
        }
        if self.runtime_class_name:
            spec["runtimeClassName"] = self.runtime_class_name
        if self.node_selector:
            spec["nodeSelector"] = self.node_selector
        return {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": name,
                "labels": {
                    LABEL: "1",
                    f"{LABEL}.run_id": _dns_token(run_id),
                    f"{LABEL}.substrate": _dns_token(self.name),
                },
                "annotations": {
                    f"{LABEL}.run_id": run_id,
                    f"{LABEL}.created_at": datetime.now(UTC).isoformat(),
                    f"{LABEL}.owner": self._owner,
                    f"{LABEL}.substrate": self.name,
                },
            },
            "spec": spec,
        }

    @redacting
    def create(self, run_id: str) -> Environment:
        name = _dns_token(f"rtax-{run_id}")
        body = self._manifest(name, run_id)
        try:
            pod = self._call(
                "pod create",
                lambda left: self.api.create_namespaced_pod(
                    self.namespace,
                    body,
                    _preload_content=False,
                    _request_timeout=self._timeout(left),
                ),
                fail=CreateFailed,
                slow=CreateTimeout,
                timeout_s=self.create_timeout_s,
            )
        except CreateTimeout:
            # The API may have made the pod before its answer was lost: delete it by name.
            self._delete_quietly(name)
            raise
        rv = pod["metadata"]["resourceVersion"]
        env = Environment(
            env_id=name, run_id=run_id, handle={"pod": pod, "rv": rv, "uid": pod["metadata"]["uid"]}
        )
        env.mark("created")
        return env

    @redacting
    def wait_running(self, env: Environment, timeout_s: float) -> None:
        if self.watch_events:
            self._start_event_watch(env, timeout_s)
        deadline = clock() + timeout_s
        pod, rv = env.handle["pod"], env.handle["rv"]
        seen: set[str] = set()
        while True:
            if self._observe(env, pod, seen):
                return
            left = deadline - clock()
            if left <= 0:
                raise ReadyTimeout(
                    f"pod {env.env_id} not running after {timeout_s:g} s: {_pending_reason(pod)}"
                )
            try:
                for kind, obj in self._watch(env.env_id, rv, left, ReadyTimeout):
                    rv = obj["metadata"]["resourceVersion"]
                    if kind == "DELETED":
                        raise EnvironmentLost(f"pod {env.env_id} deleted while starting")
                    pod = obj
                    if self._observe(env, pod, seen):
                        return
            except _Expired:
                pod = self._get(env.env_id, ReadyTimeout, left)  # resync, then watch again
                if pod is None:
                    raise EnvironmentLost(f"pod {env.env_id} is gone") from None
                rv = pod["metadata"]["resourceVersion"]

    def _observe(self, env: Environment, pod: dict[str, Any], seen: set[str]) -> bool:
        """Mark newly true conditions; True once Running; raise if it can't get there."""
        status = pod.get("status") or {}
        for cond in status.get("conditions") or []:
            milestone = _CONDITIONS.get(cond.get("type"))
            if milestone and cond.get("status") == "True" and milestone not in seen:
                seen.add(milestone)
                env.mark(milestone)
        phase = status.get("phase")
        if phase == "Running":
            env.mark("running")
            return True
        if phase in ("Failed", "Succeeded"):
            raise EnvironmentLost(
                f"pod {env.env_id} {phase} at start: {status.get('reason') or ''} "
                f"{status.get('message') or _pending_reason(pod)}".strip()
            )
        for cs in status.get("containerStatuses") or []:
            waiting = (cs.get("state") or {}).get("waiting") or {}
            if waiting.get("reason") in FATAL_WAITING:
                raise CreateFailed(
                    f"pod {env.env_id} can't start: {waiting['reason']}: "
                    f"{waiting.get('message', '')}"[:500]
                )
        return False

    def _watch(
        self, name: str, rv: str, timeout_s: float, slow: type[SubstrateError]
    ) -> Iterator[tuple[str, dict[str, Any]]]:
        """(type, pod) events of one pod after resourceVersion `rv`, for at most `timeout_s`.

        Raises `_Expired` on 410 Gone (the caller re-reads the pod and watches again)."""
        from kubernetes.watch.watch import iter_resp_lines

        seconds = max(1, math.ceil(timeout_s))
        resp = self._call(
            "pod watch",
            lambda left: self.api.list_namespaced_pod(
                self.namespace,
                field_selector=f"metadata.name={name}",
                resource_version=rv,
                watch=True,
                timeout_seconds=seconds,
                allow_watch_bookmarks=False,
                _preload_content=False,
                _request_timeout=(min(left, self.api_timeout_s), seconds + 5),
            ),
            fail=slow,
            slow=slow,
            timeout_s=timeout_s,
            raw=True,
        )
        try:
            for line in iter_resp_lines(resp):
                if not line.strip():
                    continue
                event = json.loads(line)
                if event["type"] == "ERROR":
                    obj = event.get("object") or {}
                    if obj.get("code") == 410:
                        raise _Expired()
                    raise slow(f"pod watch: {obj.get('code')} {obj.get('message')}")
                if event["type"] == "BOOKMARK":
                    continue
                yield event["type"], event["object"]
        except Exception as exc:
            if _is_timeout(exc):
                raise slow(f"pod watch: no answer within {timeout_s:g} s") from None
            if _is_transport(exc):
                raise slow(f"pod watch: {_transport_reason(exc)}") from None
            raise
        finally:
            # Close, not only release: a watch left mid-stream must not go back to the pool.
            resp.close()
            resp.release_conn()

    def _start_event_watch(self, env: Environment, timeout_s: float) -> None:
        """Watch the pod's events in the background and mark the kubelet's reports (image
        pulled, container created/started) when they arrive. Best effort: it explains the
        orchestration phase, it never decides it."""
        from kubernetes.watch.watch import iter_resp_lines

        name, rv = env.env_id, env.handle["rv"]
        state: dict[str, Any] = {"resp": None, "stop": False}

        def watch() -> None:
            resp = None
            with contextlib.suppress(Exception):
                resp = self.api.list_namespaced_event(
                    self.namespace,
                    field_selector=f"involvedObject.name={name}",
                    resource_version=rv,
                    watch=True,
                    timeout_seconds=max(1, math.ceil(timeout_s)),
                    _preload_content=False,
                    _request_timeout=(self.api_timeout_s, timeout_s + 5),
                )
                state["resp"] = resp
                seen: set[str] = set()
                # "Pulling" only comes when the image is pulled; the other three always come.
                done = set(_EVENTS.values()) - {"image_pulling"}
                for line in iter_resp_lines(resp) if not state["stop"] else ():
                    event = json.loads(line) if line.strip() else {}
                    reason = (event.get("object") or {}).get("reason")
                    milestone = _EVENTS.get(reason or "")
                    if milestone and milestone not in seen and event.get("type") == "ADDED":
                        seen.add(milestone)
                        env.mark(milestone)
                    if state["stop"] or seen >= done:
                        break
            if resp is not None:  # end the server's watch now, not at its timeout
                with contextlib.suppress(Exception):
                    resp.close()
                    resp.release_conn()

        thread = threading.Thread(target=watch, daemon=True, name=f"k8s-events-{name}")
        env.handle["events"] = (thread, state)
        thread.start()

    def _stop_event_watch(self, env: Environment) -> None:
        watcher = env.handle.get("events") if isinstance(env.handle, dict) else None
        if watcher is None:
            return
        thread, state = watcher
        state["stop"] = True
        resp = state["resp"]
        if resp is not None:
            with contextlib.suppress(Exception):
                resp.shutdown()  # unblock the reader; the thread then ends
        thread.join(timeout=5)

    @redacting
    def run(self, env: Environment, command: str, timeout_s: float) -> CommandResult:
        k8s = _k8s()
        t0 = clock()
        argv = [
            "timeout",
            "-k",
            f"{_KILL_GRACE_S:g}",
            f"{max(timeout_s, 0.001):.3f}",
            "sh",
            "-c",
            command,
        ]
        kwargs: dict[str, Any] = {}
        if self.exec_protocol:
            kwargs["_headers"] = {"sec-websocket-protocol": PROTOCOLS[self.exec_protocol]}
        budget = timeout_s + _KILL_GRACE_S + _WS_MARGIN_S
        deadline = t0 + budget
        _bound_websocket_connect()
        attempt = 0
        while True:
            attempt += 1
            # The TCP connect and the upgrade handshake: at most api_timeout_s, within budget.
            connect_s = max(min(self.api_timeout_s, deadline - clock()), 0.001)
            _WS_TIMEOUT.seconds = connect_s
            try:
                ws = k8s.stream.stream(
                    self._exec_api().connect_get_namespaced_pod_exec,
                    env.env_id,
                    self.namespace,
                    container=CONTAINER,
                    command=argv,
                    stdin=False,
                    stdout=True,
                    stderr=True,
                    tty=False,
                    binary=True,
                    _preload_content=False,
                    **kwargs,
                )
                break
            except Exception as error:
                # The client loses a failed handshake's ApiException while decoding its (None)
                # body, raising AttributeError from it: find it in the chain.
                exc = _chained(error, k8s.client.ApiException)
                if exc is None:
                    raise
                status = _handshake_status(exc)
                wait = self._backoff(attempt, exc)
                # Retries are bounded by the attempts and by the command's own timeout.
                if (
                    status == 429
                    and attempt < self.max_attempts
                    and clock() + wait < t0 + timeout_s
                ):
                    time.sleep(wait)
                    continue
                if status == 429:
                    raise RateLimited(f"exec: HTTP 429 after {attempt} attempts") from None
                if status is None and _is_ws_timeout(exc):
                    raise ExecError(
                        f"exec: no answer to the WebSocket upgrade within {connect_s:.3g} s"
                    ) from None
                message = f"exec refused: {_reason(exc)[:300]}"
                failure = self._exec_failure(env, message)
                if (
                    type(failure) is ExecError
                    and status is not None
                    and 400 <= status < 500
                    and status not in _EXEC_RETRYABLE
                ):
                    raise ExecRefused(message) from None
                raise failure from None
            finally:
                _WS_TIMEOUT.seconds = None
        try:
            while ws.is_open():
                left = deadline - clock()
                if left <= 0:
                    raise CommandTimeout(
                        f"no exit status {budget:.3g} s after the command started; stream closed"
                    )
                # Bounds a frame that starts and never ends, as well as the wait for one.
                ws.sock.settimeout(left)
                ws.update(timeout=min(left, 5.0))
            out = ws.read_channel(1) or b""
            err = ws.read_channel(2) or b""
            raw_status = ws.read_channel(3) or b""
        except CommandTimeout:
            raise
        except Exception as exc:
            if _is_ws_timeout(exc):  # a frame begun and never finished by the deadline
                raise CommandTimeout(
                    f"no exit status {budget:.3g} s after the command started (a frame stalled); "
                    "stream closed"
                ) from None
            raise self._exec_failure(env, f"exec stream: {type(exc).__name__}: {exc}") from None
        finally:
            with contextlib.suppress(Exception):
                ws.close()
        latency = clock() - t0
        code = _exit_code(raw_status)
        if code is None:
            raise self._exec_failure(
                env, f"exec ended without an exit status ({raw_status[:200]!r})"
            )
        if code in (_TIMEOUT_EXIT, 137) and latency >= timeout_s:
            raise CommandTimeout(f"killed after {timeout_s:.3g} s (exit {code})")
        if code == 0 and not env.handle.get("first_command"):
            env.handle["first_command"] = True
            env.mark("first_command")
        return CommandResult(
            code, out.decode("utf-8", "replace"), err.decode("utf-8", "replace"), latency
        )

    def _exec_api(self) -> Any:
        api = getattr(self._exec_clients, "api", None)
        if api is None:
            k8s = _k8s()
            api = k8s.client.CoreV1Api(k8s.client.ApiClient(self._cfg))
            self._exec_clients.api = api
        return api

    def _exec_failure(self, env: Environment, message: str) -> SubstrateError:
        """`EnvironmentLost` if the pod is gone or no longer running, else `ExecError`."""
        try:
            pod = self._get(env.env_id, ExecError, self.api_timeout_s)
        except SubstrateError:
            return ExecError(message)
        if pod is None:
            return EnvironmentLost(f"pod {env.env_id} is gone ({message})")
        phase = (pod.get("status") or {}).get("phase")
        if phase != "Running" or pod["metadata"].get("deletionTimestamp"):
            return EnvironmentLost(f"pod {env.env_id} is {phase} ({message})")
        return ExecError(message)

    def _get(
        self, name: str, slow: type[SubstrateError], timeout_s: float
    ) -> dict[str, Any] | None:
        return self._call(
            "pod get",
            lambda left: self.api.read_namespaced_pod(
                name, self.namespace, _preload_content=False, _request_timeout=self._timeout(left)
            ),
            fail=slow,
            slow=slow,
            timeout_s=timeout_s,
            missing_ok=True,
        )

    @redacting
    def destroy(self, env: Environment, timeout_s: float) -> None:
        self._stop_event_watch(env)
        self._delete_and_wait(env.env_id, timeout_s)
        env.mark("removed")

    def _delete_and_wait(self, name: str, timeout_s: float) -> None:
        """Delete with grace period 0, then watch until the API has no such pod.

        Both answers a server may give are handled: the pod removed with the answer (a real API
        server's force deletion: the GET that follows is a 404 and nothing is waited for) or a
        terminating pod (deletionTimestamp set: its DELETED event is watched for)."""
        deadline = clock() + timeout_s
        body = {"apiVersion": "v1", "kind": "DeleteOptions", "gracePeriodSeconds": 0}
        pod = self._call(
            f"delete {name}",
            lambda left: self.api.delete_namespaced_pod(
                name,
                self.namespace,
                body=body,
                grace_period_seconds=0,
                _preload_content=False,
                _request_timeout=self._timeout(left),
            ),
            fail=CleanupFailed,
            slow=CleanupFailed,
            timeout_s=timeout_s,
            missing_ok=True,
        )
        if pod is not None:
            # A real API server removes a pod deleted with grace period 0 at once, and recent
            # ones answer with the deletion's resourceVersion, so a watch from the answer would
            # never see DELETED: read the pod again and watch from there.
            pod = self._get(name, CleanupFailed, max(deadline - clock(), 0.5))
        while pod is not None:
            left = deadline - clock()
            if left <= 0:
                raise CleanupFailed(f"pod {name} still exists {timeout_s:g} s after delete")
            try:
                for kind, _ in self._watch(
                    name, pod["metadata"]["resourceVersion"], left, CleanupFailed
                ):
                    if kind == "DELETED":
                        return
            except _Expired:
                pass
            pod = self._get(name, CleanupFailed, max(deadline - clock(), 0.5))

    def _delete_quietly(self, name: str) -> None:
        with contextlib.suppress(Exception):
            self.api.delete_namespaced_pod(
                name, self.namespace, grace_period_seconds=0, _request_timeout=self.api_timeout_s
            )

    @redacting
    def leftovers(self) -> list[Leftover]:
        """Pods of this substrate name carrying the rtax label, in `namespace`."""
        found = self._plain(
            "list leftovers",
            lambda **options: self.api.list_namespaced_pod(
                self.namespace,
                label_selector=f"{LABEL},{LABEL}.substrate={_dns_token(self.name)}",
                **options,
            ),
        )
        result = []
        for pod in found.get("items") or []:
            meta = pod["metadata"]
            notes = meta.get("annotations") or {}
            labels = meta.get("labels") or {}
            result.append(
                Leftover(
                    env_id=meta["name"],
                    run_id=notes.get(f"{LABEL}.run_id") or labels.get(f"{LABEL}.run_id"),
                    created_at=notes.get(f"{LABEL}.created_at") or meta.get("creationTimestamp"),
                    owner=notes.get(f"{LABEL}.owner"),
                    detail=f"{self.namespace}, {(pod.get('status') or {}).get('phase')}",
                )
            )
        return result

    @redacting
    def prepare(self, log: Callable[[str], None]) -> None:
        """Check that the API answers and that pods can be listed in `namespace`."""
        try:
            self._version()
            self._plain(
                "list pods",
                lambda **options: self.api.list_namespaced_pod(self.namespace, limit=1, **options),
            )
        except SubstrateError as exc:
            raise SubstrateError(f"kubernetes API at {self._cfg.host} not usable: {exc}") from None
        log(f"kubernetes {self._server_version} at {self._cfg.host}, namespace {self.namespace}")

    def _version(self) -> str:
        if self._server_version is None:
            k8s = _k8s()
            version_api = k8s.client.VersionApi(self.api.api_client)
            info = self._plain("version", version_api.get_code)
            self._server_version = str(info.get("gitVersion"))
        return self._server_version

    def close(self) -> None:
        """Close the API client's connection pool (and its thread pool, if one was made)."""
        with contextlib.suppress(Exception):
            self.api.api_client.close()

    def describe(self) -> dict[str, Any]:
        """Provenance; never a credential (tokens and keys stay in the client configuration)."""
        try:
            server = self._version()
        except SubstrateError:
            server = None
        return {
            "kind": self.kind,
            "fidelity": self.fidelity,
            "endpoint": self._cfg.host,
            "config_source": self.source,
            "context": self.context,
            "server_version": server,
            "namespace": self.namespace,
            "image": self.image,
            "image_pull_policy": self.image_pull_policy,
            "cpu": self.cpu,
            "memory": self.memory,
            "runtime_class_name": self.runtime_class_name,
            "node_selector": self.node_selector,
            "exec_protocol": PROTOCOLS.get(self.exec_protocol or "", "v5,v4 offered"),
            "client": {
                "kubernetes": metadata.version("kubernetes"),
                "websocket-client": metadata.version("websocket-client"),
            },
        }


class ExecRefused(ExecError):
    """The API refused an exec for good (403 forbidden, ...): ``exec_error``, and permanent,
    so the probe runner's ready phase stops at once instead of retrying a refusal until it
    becomes a ``ready_timeout`` much later."""

    permanent = True


#: Exec refusals worth retrying: a container not there yet or a stale kubelet (400), a pod the
#: API still has but the kubelet not (404), a timeout (408), rate limiting (429).
_EXEC_RETRYABLE = {400, 404, 408, 429}

_WS_TIMEOUT = threading.local()
_WS_PATCH = threading.Lock()


def _bound_websocket_connect() -> None:
    """Make the client's exec WebSocket connect with a timeout when this thread asks for one.

    kubernetes.stream.ws_client.create_websocket builds a ``websocket.WebSocket`` and calls
    ``connect(url, header=...)`` without a ``timeout``, which leaves the socket blocking through
    the TCP connect and the upgrade handshake; no argument of `stream()` reaches it. Once per
    process, the module's ``WebSocket`` becomes a subclass whose ``connect`` adds the timeout
    set in `_WS_TIMEOUT` by this thread; without one (any other caller) it behaves as before."""
    from kubernetes.stream import ws_client

    with _WS_PATCH:
        base = ws_client.WebSocket
        if getattr(base, "_rtax_bounded", False):
            return

        class BoundedWebSocket(base):  # type: ignore[misc, valid-type]
            _rtax_bounded = True

            def connect(self, url: str, **options: Any) -> None:
                timeout = getattr(_WS_TIMEOUT, "seconds", None)
                if timeout is not None:
                    options.setdefault("timeout", timeout)
                super().connect(url, **options)

        ws_client.WebSocket = BoundedWebSocket


class _Expired(Exception):
    """A watch's resourceVersion is older than the server keeps (410 Gone)."""


def _status_message(exc: Any) -> str:
    """The Status message of an API error body (never its headers: they may echo anything)."""
    try:
        body = json.loads(exc.body)
        return f"{body.get('reason', '')}: {body.get('message', '')}"[:500]
    except (TypeError, ValueError, AttributeError):
        return str(exc.reason or "")[:200]


def _reason(exc: Any) -> str:
    return str(getattr(exc, "reason", "") or exc).split(" -+-+- ")[0][:300]


def _chained(exc: BaseException | None, kind: type[BaseException]) -> Any:
    """`exc` or the first exception of type `kind` in its context chain, else None."""
    while exc is not None and not isinstance(exc, kind):
        exc = exc.__context__
    return exc


def _handshake_status(exc: Any) -> int | None:
    match = re.search(r"Handshake status (\d{3})", str(getattr(exc, "reason", "") or ""))
    return int(match.group(1)) if match else None


def _exit_code(raw: bytes) -> int | None:
    """The exit code in the status channel's v1 Status (as the client reads it)."""
    try:
        status = json.loads(raw)
    except ValueError:
        return None
    if not isinstance(status, dict):
        return None
    if status.get("status") == "Success":
        return 0
    if status.get("reason") == "NonZeroExitCode":
        for cause in (status.get("details") or {}).get("causes") or []:
            if cause.get("reason") == "ExitCode":
                with contextlib.suppress(TypeError, ValueError):
                    return int(cause.get("message"))
    return None


def _pending_reason(pod: dict[str, Any]) -> str:
    status = pod.get("status") or {}
    for cs in status.get("containerStatuses") or []:
        waiting = (cs.get("state") or {}).get("waiting") or {}
        if waiting.get("reason"):
            return f"{waiting['reason']} {waiting.get('message', '')}".strip()
    for cond in status.get("conditions") or []:
        if cond.get("status") != "True" and cond.get("message"):
            return f"{cond['type']}: {cond['message']}"
    return f"phase {status.get('phase')}"


def _is_timeout(exc: BaseException) -> bool:
    import urllib3

    inner = getattr(exc, "reason", None)
    refused = urllib3.exceptions.NewConnectionError  # (a ConnectTimeoutError, by history)
    if isinstance(exc, refused) or isinstance(inner, refused):
        return False
    return isinstance(exc, (urllib3.exceptions.TimeoutError, TimeoutError)) or isinstance(
        inner, urllib3.exceptions.TimeoutError
    )


def _is_ws_timeout(exc: BaseException | None) -> bool:
    """Whether `exc` or an exception it arose from is a socket or WebSocket timeout."""
    from websocket import WebSocketTimeoutException

    while exc is not None:
        if isinstance(exc, (TimeoutError, WebSocketTimeoutException)):
            return True
        exc = exc.__context__
    return False


def _is_transport(exc: BaseException) -> bool:
    import urllib3

    return isinstance(exc, (urllib3.exceptions.HTTPError, ConnectionError))


def _transport_reason(exc: BaseException) -> str:
    inner = getattr(exc, "reason", None) or exc
    return type(inner).__name__
