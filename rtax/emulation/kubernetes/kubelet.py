"""The scheduler and kubelet of the emulated node: each pod's life on a real Docker container.

Why (docs/emulations.md): a rollout's commands must really run, and the client must see a pod
go through the phases, conditions, container statuses and events a real node reports (Pending ->
scheduled, image checked, container created, started -> Running; ``ErrImagePull`` then
``ImagePullBackOff`` for an image the Docker engine lacks). The work runs on a thread pool, apart
from the API server's loop, and changes the pod only through `Etcd`, as a kubelet changes it
only through the API. Every backing container is one of
`rtax.substrates.docker.substrate.DockerSubstrate` named ``kubernetes-emulation``, so the reaper can
find the orphans of a dead process.
"""

from __future__ import annotations

import contextlib
import copy
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from rtax.emulation.backing import remove as remove_backing
from rtax.emulation.faults import Faults
from rtax.emulation.kubernetes.api import timestamp
from rtax.emulation.kubernetes.etcd import Etcd

#: What the emulation's backing containers are labelled with (rtax.substrate=...).
BACKING_NAME = "kubernetes-emulation"
NODE_NAME = "rtax-emulated-node"


class Kubelet:
    """Runs the pods of `state` on Docker; `image` is the emulation's runner image (its substrate
    removes the backing containers), `faults` the emulation's (its ``schedule`` operation).
    `start` before the first pod, `stop` to remove them all."""

    def __init__(self, state: Etcd, image: str, backoff_after_s: float, faults: Faults) -> None:
        self.state = state
        self.faults = faults
        self.image = image
        self.backoff_after_s = backoff_after_s
        self.envs: dict[str, Any] = {}  # pod uid -> backing Environment
        self._backing: dict[str, Any] = {}
        self._made: set[str] = set()  # run ids of the backing containers
        self._pod_locks: dict[str, threading.Lock] = {}
        self._lock = threading.Lock()
        self._pool: ThreadPoolExecutor | None = None

    def start(self) -> None:
        self._pool = ThreadPoolExecutor(max_workers=32, thread_name_prefix="k8s-kubelet")

    def stop(self) -> None:
        """Wait for the running work (held pods give up once `state` is closed), then remove
        every container made."""
        if self._pool is not None:
            # Background container removals still queued are cancelled: their containers are
            # still in `envs` and are removed below; the running ones are waited for.
            self._pool.shutdown(wait=True, cancel_futures=True)
            self._pool = None
        for env in list(self.envs.values()):
            with contextlib.suppress(Exception):
                self.docker(self.image).destroy(env, 60)
        self.envs.clear()
        # Backstop: any other container this emulation made (one label for every image).
        sub = self.docker(self.image)
        for leftover in sub.leftovers():
            if leftover.run_id in self._made:
                sub.destroy(leftover, 60)

    def start_pod(self, ns: str, name: str) -> None:
        """Schedule and start a new pod in the background."""
        assert self._pool is not None
        self._pool.submit(self._run_pod, ns, name)

    def remove_pod(self, ns: str, name: str, uid: str, last: dict[str, Any]) -> None:
        """Stop and remove a deleted pod's container in the background."""
        assert self._pool is not None
        self._pool.submit(self._terminate, ns, name, uid, last)

    # -- backing containers (the kubelet's runtime) ------------------------------------------------

    def docker(self, image: str, cpus: float | None = 1.0, memory: int | None = None) -> Any:
        from rtax.substrates.docker.substrate import DockerSubstrate

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
        now = timestamp()
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
        pod = self._schedule(ns, name, uid, pod)
        if pod is None:
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
            sub = self.docker(image, _cpus(limits.get("cpu")), _bytes(limits.get("memory")))

            def admitted(p: dict[str, Any]) -> None:
                st = p["status"]
                st["hostIP"] = "127.0.0.1"
                st["startTime"] = timestamp()
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
                self.envs[uid] = env
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
                state = {"running": {"startedAt": timestamp()}}
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

    def _schedule(self, ns: str, name: str, uid: str, pod: dict[str, Any]) -> dict[str, Any] | None:
        """The scheduler's attempts, with the planted ``schedule`` faults: a failed attempt
        leaves the pod Pending, ``PodScheduled`` False ``Unschedulable``, and is retried every
        0.1 s, as the scheduler retries an unschedulable pod. The pod as it is once it may be
        bound, or None if it went away (or the emulation stopped) meanwhile."""
        held = False
        while (fault := self.faults.take("schedule")) is not None:
            self.faults.wait(fault.delay_s)
            if fault.failing:
                if not held:
                    held = True
                    self.state.update(ns, name, _unschedulable(fault.message))
                self.faults.wait(0.1)  # the scheduler's retry of an unschedulable pod
            pod = self.state.get("pods", ns, name)
            if pod is None or pod["metadata"]["uid"] != uid or self.state.closed:
                return None
            if not fault.failing:
                break
        return pod

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
            env = self.envs.pop(uid, None)
            if env is not None:
                self._event(last, "Killing", "Stopping container main")
                remove_backing(self.docker(self.image), env)
            with self.state.lock:
                pod = self.state.objects["pods"].get((ns, name))
                if pod is not None and pod["metadata"]["uid"] == uid:
                    self.state.commit("pods", "DELETED", copy.deepcopy(pod))


def _unschedulable(message: str) -> Any:
    """The change a scheduler makes to a pod no node fits."""

    def change(p: dict[str, Any]) -> None:
        cond = _condition("PodScheduled", "False", "Unschedulable")
        cond["message"] = f"0/1 nodes are available: {message}."
        p["status"]["conditions"] = [cond]

    return change


def _condition(kind: str, status: str = "True", reason: str | None = None) -> dict[str, Any]:
    cond: dict[str, Any] = {
        "type": kind,
        "status": status,
        "lastProbeTime": None,
        "lastTransitionTime": timestamp(),
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
