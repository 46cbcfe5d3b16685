"""`KubernetesSubstrate`: the eight methods of the protocol, each one step of a Pod's life.

Why a thin class: what a step does lives beside the API it speaks (`pod` the spec and marks,
`watch` orchestration and cleanup, `exec` commands, `client` the call path); this class holds
the configuration, maps each protocol method to those steps and keeps credentials out of every
message (`redacting`) and of `describe()`.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable
from importlib import metadata
from typing import Any

from rtax.assets.image import RUNNER_IMAGE
from rtax.core import redaction
from rtax.core.failures import CreateFailed, CreateTimeout, SubstrateError
from rtax.substrates import kit
from rtax.substrates.base import (
    FIDELITIES,
    CommandResult,
    Environment,
    Leftover,
    RateLimitWait,
    redacting,
)
from rtax.substrates.emulated import EmulationWatch
from rtax.substrates.kubernetes import exec as pod_exec
from rtax.substrates.kubernetes import pod as pods
from rtax.substrates.kubernetes import watch
from rtax.substrates.kubernetes.client import Api, configuration, k8s, secrets


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
        rate_limit_attempts: int = 6,
        rate_limit_base_s: float = 0.2,
        rate_limit_max_s: float = 10.0,
        rate_limit_deadline_s: float = 60.0,
    ) -> None:
        if fidelity not in FIDELITIES:
            raise ValueError(f"fidelity must be one of {', '.join(FIDELITIES)}, got {fidelity!r}")
        if exec_protocol is not None and exec_protocol not in pod_exec.PROTOCOLS:
            raise ValueError(f"exec_protocol must be v4, v5 or unset, got {exec_protocol!r}")
        self.name = name
        self._fidelity = fidelity
        #: an rtax emulation's answer makes the samples `emulated`, whatever was configured
        self.emulation = EmulationWatch()
        self.namespace = namespace
        self.spec = pods.PodSpec(
            image=image,
            image_pull_policy=image_pull_policy,
            cpu=cpu,
            memory=memory,
            runtime_class_name=runtime_class_name,
            node_selector=dict(node_selector or {}),
            working_dir=working_dir,
        )
        self.exec_protocol = exec_protocol
        self.watch_events = watch_events
        #: where a pod reaches this host: only the configuration knows
        self.host_address = host_address
        self.create_timeout_s = create_timeout_s
        self.context = context
        self.source = "host" if host else "in-cluster" if in_cluster else "kubeconfig"
        self.rate_limit = kit.RetryPolicy(
            attempts=rate_limit_attempts,
            base_s=rate_limit_base_s,
            max_s=rate_limit_max_s,
            deadline_s=rate_limit_deadline_s,
        )
        self._cfg = configuration(kubeconfig, context, in_cluster, host, token, ca_cert, verify_ssl)
        redaction.register(*secrets(self._cfg))  # kept out of every log record too
        self._api = Api(self._cfg, namespace, api_timeout_s, self.rate_limit)
        #: the client's CoreV1Api (tests and tools read the API through it)
        self.api = self._api.core
        self.emulation.watch_openapi(self.api.api_client)
        # `stream()` swaps its ApiClient's request method while it connects: one per thread.
        self._exec_clients = threading.local()
        self._server_version: str | None = None

    @property
    def fidelity(self) -> str:
        return self.emulation.fidelity(self._fidelity)

    def _secrets(self) -> list[str]:
        return secrets(self._cfg)

    @redacting
    def create(self, run_id: str, *, lifetime_s: float | None = None) -> Environment:
        name = pods.pod_name(run_id)
        body = self.spec.manifest(name, run_id, self.name, lifetime_s)
        waits: list[RateLimitWait] = []
        try:
            pod = self._api.call(
                "pod create",
                lambda left: self.api.create_namespaced_pod(
                    self.namespace,
                    body,
                    _preload_content=False,
                    _request_timeout=self._api.timeout(left),
                ),
                fail=CreateFailed,
                slow=CreateTimeout,
                timeout_s=self.create_timeout_s,
                on_wait=waits.append,
            )
        except BaseException as exc:
            # The API may have made the pod before its answer was lost or turned into an
            # error (a timeout, a reset connection, a 500 after the write, Ctrl-C): delete it
            # by name and wait until it is gone; a pod that can't be deleted now keeps its
            # labels, expiry included, for the reaper. A 4xx refused it (and a 409 names a pod
            # that is not this request's): nothing to delete.
            if not 400 <= getattr(exc, "http_status", 500) < 500:
                watch.delete_quietly(self._api, name, self._api.api_timeout_s)
            raise
        meta = pod["metadata"]
        env = Environment(
            env_id=name,
            run_id=run_id,
            handle={"pod": pod, "rv": meta["resourceVersion"], "uid": meta["uid"]},
            rate_limit_waits=waits,
        )
        env.mark("created")
        return env

    @redacting
    def wait_running(self, env: Environment, timeout_s: float) -> None:
        if self.watch_events:
            watch.start_event_watch(self._api, env, timeout_s)
        watch.wait_running(self._api, env, timeout_s)

    @redacting
    def run(self, env: Environment, command: str, timeout_s: float) -> CommandResult:
        return pod_exec.run(
            self._api, self._exec_api(), env, command, timeout_s, self.exec_protocol
        )

    def _exec_api(self) -> Any:
        api = getattr(self._exec_clients, "api", None)
        if api is None:
            lib = k8s()
            api = lib.client.CoreV1Api(lib.client.ApiClient(self._cfg))
            self._exec_clients.api = api
        return api

    @redacting
    def destroy(self, env: Environment, timeout_s: float) -> None:
        watch.stop_event_watch(env)
        watch.delete_and_wait(self._api, env.env_id, timeout_s, env.rate_limit_waits.append)
        env.mark("removed")

    def _delete_and_wait(self, name: str, timeout_s: float) -> None:
        """Delete the pod `name` and wait until the API has none (no rollout's record)."""
        watch.delete_and_wait(self._api, name, timeout_s)

    @redacting
    def leftovers(self) -> list[Leftover]:
        """Pods of this substrate name carrying the rtax label, in `namespace`."""
        found = self._api.plain(
            "list leftovers",
            lambda **options: self.api.list_namespaced_pod(
                self.namespace, label_selector=pods.label_selector(self.name), **options
            ),
        )
        return [pods.leftover(pod, self.namespace) for pod in found.get("items") or []]

    @redacting
    def prepare(self, log: Callable[[str], None]) -> None:
        """Check that the API answers and that pods can be listed in `namespace`."""
        try:
            self._version()
            self._api.plain(
                "list pods",
                lambda **options: self.api.list_namespaced_pod(self.namespace, limit=1, **options),
            )
        except SubstrateError as exc:
            raise SubstrateError(f"kubernetes API at {self._cfg.host} not usable: {exc}") from None
        log(f"kubernetes {self._server_version} at {self._cfg.host}, namespace {self.namespace}")

    def _version(self) -> str:
        if self._server_version is None:
            version_api = k8s().client.VersionApi(self.api.api_client)
            info = self._api.plain("version", version_api.get_code)
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
            **self.spec.describe(),
            "exec_protocol": pod_exec.PROTOCOLS.get(self.exec_protocol or "", "v5,v4 offered"),
            "rate_limit": self.rate_limit.describe(),
            "client": {
                "kubernetes": metadata.version("kubernetes"),
                "websocket-client": metadata.version("websocket-client"),
            },
        }
