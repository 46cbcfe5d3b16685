"""The API server's storage, as etcd is a real one's: pods and events, one resourceVersion counter,
and watches.

Why (docs/emulations.md): the client's watch-based waiting is only exercised if a watch
behaves as on a real cluster: resumable from a ``resourceVersion`` out of a bounded history,
``410 Gone`` once that is compacted away, and synthetic ``ADDED`` events for the current state
when it starts from now. The kubelet (threads) and the routes (the server's loop) both write here.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import json
import threading
import time
from collections import deque
from collections.abc import AsyncIterator, Callable
from typing import Any

from rtax.emulation.kubernetes.api import status_body

#: How many watch events are kept; a watch from an older resourceVersion gets 410 Gone.
HISTORY = 10_000


class Etcd:
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

    async def watch(
        self,
        resource: str,
        matches: Callable[[dict[str, Any]], bool],
        since: str | None,
        timeout_s: float,
    ) -> AsyncIterator[bytes]:
        """Events after `since` as JSON lines; from "now" (after synthetic ADDED events of the
        current state) when `since` is empty or "0"; 410 Gone when `since` is compacted away."""
        state = self
        wake = asyncio.Event()
        state.loop = asyncio.get_running_loop()
        state.waiters.add(wake)
        deadline = time.monotonic() + timeout_s
        try:
            with state.lock:
                if not since or since == "0":
                    last = state.rv
                    backlog = [
                        {"type": "ADDED", "object": with_kind(resource, copy.deepcopy(o))}
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
                        event = {"type": kind, "object": with_kind(resource, obj)}
                        yield (json.dumps(event) + "\n").encode()
                left = deadline - time.monotonic()
                if left <= 0:
                    return
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(wake.wait(), left)
        finally:
            state.waiters.discard(wake)


def with_kind(resource: str, obj: dict[str, Any]) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod" if resource == "pods" else "Event", **obj}
