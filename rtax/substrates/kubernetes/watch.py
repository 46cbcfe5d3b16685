"""Pending -> Running and present -> gone, as watches report them.

Why watches and not polls: a watch started from the resourceVersion the previous answer carried
misses no transition and has no polling interval to measure, so orchestration and cleanup carry
no resolution. The conditions the pod watch shows and the kubelet's events (a second,
best-effort watch in the background) become native milestones at the time this host observed
them; they explain a phase and never decide it.
"""

from __future__ import annotations

import contextlib
import json
import math
import threading
from collections.abc import Iterator
from typing import Any

from rtax.core.failures import (
    CleanupFailed,
    CreateFailed,
    EnvironmentLost,
    ReadyTimeout,
    SubstrateError,
)
from rtax.substrates.base import Environment, clock
from rtax.substrates.kubernetes.client import (
    Api,
    Expired,
    OnWait,
    unanswered,
)
from rtax.substrates.kubernetes.pod import FATAL_WAITING, pending_reason

#: pod condition -> milestone
CONDITIONS = {
    "PodScheduled": "scheduled",
    "Initialized": "initialized",
    "ContainersReady": "containers_ready",
    "Ready": "pod_ready",  # not "ready": that is a phase of the measurement model
}
#: kubelet event reason -> milestone
EVENTS = {
    "Pulling": "image_pulling",
    "Pulled": "image_pulled",
    "Created": "container_created",
    "Started": "container_started",
}


def pod_watch(
    api: Api,
    name: str,
    rv: str,
    timeout_s: float,
    slow: type[SubstrateError],
    on_wait: OnWait = None,
) -> Iterator[tuple[str, dict[str, Any]]]:
    """(type, pod) events of one pod after resourceVersion `rv`, for at most `timeout_s`.

    Raises `Expired` on 410 Gone (the caller re-reads the pod and watches again)."""
    from kubernetes.watch.watch import iter_resp_lines

    seconds = max(1, math.ceil(timeout_s))
    resp = api.call(
        "pod watch",
        lambda left: api.core.list_namespaced_pod(
            api.namespace,
            field_selector=f"metadata.name={name}",
            resource_version=rv,
            watch=True,
            timeout_seconds=seconds,
            allow_watch_bookmarks=False,
            _preload_content=False,
            _request_timeout=(min(left, api.api_timeout_s), seconds + 5),
        ),
        fail=slow,
        slow=slow,
        timeout_s=timeout_s,
        raw=True,
        on_wait=on_wait,
    )
    try:
        for line in iter_resp_lines(resp):
            if not line.strip():
                continue
            event = json.loads(line)
            if event["type"] == "ERROR":
                obj = event.get("object") or {}
                if obj.get("code") == 410:
                    raise Expired()
                raise slow(f"pod watch: {obj.get('code')} {obj.get('message')}")
            if event["type"] == "BOOKMARK":
                continue
            yield event["type"], event["object"]
    except Exception as exc:
        lost = unanswered(exc, "pod watch", timeout_s, fail=slow, slow=slow)
        if lost is None:
            raise
        raise lost from None
    finally:
        # Close, not only release: a watch left mid-stream must not go back to the pool.
        resp.close()
        resp.release_conn()


def wait_running(api: Api, env: Environment, timeout_s: float) -> None:
    """Return once the pod is Running, marking its conditions as they come true."""
    deadline = clock() + timeout_s
    pod, rv = env.handle["pod"], env.handle["rv"]
    seen: set[str] = set()
    while True:
        if observe(env, pod, seen):
            return
        left = deadline - clock()
        if left <= 0:
            raise ReadyTimeout(
                f"pod {env.env_id} not running after {timeout_s:g} s: {pending_reason(pod)}"
            )
        try:
            for kind, obj in pod_watch(
                api, env.env_id, rv, left, ReadyTimeout, env.rate_limit_waits.append
            ):
                rv = obj["metadata"]["resourceVersion"]
                if kind == "DELETED":
                    raise EnvironmentLost(f"pod {env.env_id} deleted while starting")
                pod = obj
                if observe(env, pod, seen):
                    return
        except Expired:  # too old a resourceVersion: read the pod again, then watch again
            pod = api.get(env.env_id, ReadyTimeout, left, env.rate_limit_waits.append)
            if pod is None:
                raise EnvironmentLost(f"pod {env.env_id} is gone") from None
            rv = pod["metadata"]["resourceVersion"]


def observe(env: Environment, pod: dict[str, Any], seen: set[str]) -> bool:
    """Mark newly true conditions; True once Running; raise if it can't get there."""
    status = pod.get("status") or {}
    for cond in status.get("conditions") or []:
        milestone = CONDITIONS.get(cond.get("type"))
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
            f"{status.get('message') or pending_reason(pod)}".strip()
        )
    for cs in status.get("containerStatuses") or []:
        waiting = (cs.get("state") or {}).get("waiting") or {}
        if waiting.get("reason") in FATAL_WAITING:
            raise CreateFailed(
                f"pod {env.env_id} can't start: {waiting['reason']}: {waiting.get('message', '')}"[
                    :500
                ]
            )
    return False


def start_event_watch(api: Api, env: Environment, timeout_s: float) -> None:
    """Watch the pod's events in the background and mark the kubelet's reports (image pulled,
    container created/started) when they arrive."""
    from kubernetes.watch.watch import iter_resp_lines

    name, rv = env.env_id, env.handle["rv"]
    state: dict[str, Any] = {"resp": None, "stop": False}

    def watch() -> None:
        resp = None
        with contextlib.suppress(Exception):
            resp = api.core.list_namespaced_event(
                api.namespace,
                field_selector=f"involvedObject.name={name}",
                resource_version=rv,
                watch=True,
                timeout_seconds=max(1, math.ceil(timeout_s)),
                _preload_content=False,
                _request_timeout=(api.api_timeout_s, timeout_s + 5),
            )
            state["resp"] = resp
            seen: set[str] = set()
            # "Pulling" only comes when the image is pulled; the other three always come.
            done = set(EVENTS.values()) - {"image_pulling"}
            for line in iter_resp_lines(resp) if not state["stop"] else ():
                event = json.loads(line) if line.strip() else {}
                reason = (event.get("object") or {}).get("reason")
                milestone = EVENTS.get(reason or "")
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


def stop_event_watch(env: Environment) -> None:
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


def delete_and_wait(api: Api, name: str, timeout_s: float, on_wait: OnWait = None) -> None:
    """Delete with grace period 0, then watch until the API has no such pod.

    Both answers a server may give are handled: the pod removed with the answer (a real API
    server's force deletion: the GET that follows is a 404 and nothing is waited for) or a
    terminating pod (deletionTimestamp set: its DELETED event is watched for)."""
    deadline = clock() + timeout_s
    body = {"apiVersion": "v1", "kind": "DeleteOptions", "gracePeriodSeconds": 0}
    pod = api.call(
        f"delete {name}",
        lambda left: api.core.delete_namespaced_pod(
            name,
            api.namespace,
            body=body,
            grace_period_seconds=0,
            _preload_content=False,
            _request_timeout=api.timeout(left),
        ),
        fail=CleanupFailed,
        slow=CleanupFailed,
        timeout_s=timeout_s,
        missing_ok=True,
        on_wait=on_wait,
    )
    if pod is not None:
        # A real API server removes a pod deleted with grace period 0 at once, and recent
        # ones answer with the deletion's resourceVersion, so a watch from the answer would
        # never see DELETED: read the pod again and watch from there.
        pod = api.get(name, CleanupFailed, max(deadline - clock(), 0.5), on_wait)
    while pod is not None:
        left = deadline - clock()
        if left <= 0:
            raise CleanupFailed(f"pod {name} still exists {timeout_s:g} s after delete")
        try:
            for kind, _ in pod_watch(
                api, name, pod["metadata"]["resourceVersion"], left, CleanupFailed, on_wait
            ):
                if kind == "DELETED":
                    return
        except Expired:
            pass
        pod = api.get(name, CleanupFailed, max(deadline - clock(), 0.5), on_wait)


def delete_quietly(api: Api, name: str, timeout_s: float) -> None:
    """Best effort, within `timeout_s`: delete the pod `name`, which a create that failed
    after its request was sent may have made, and wait until it is gone (`delete_and_wait`:
    a missing pod answers at once). Any failure is swallowed: the create's own error is what
    the row reports, and a pod left behind carries its labels for the reaper."""
    with contextlib.suppress(Exception):
        delete_and_wait(api, name, timeout_s)
