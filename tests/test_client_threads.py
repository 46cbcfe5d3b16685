"""No client state is mutated per call: threads sharing one substrate's client keep their own
call bounds (issue 12; the emulations run up to 32 environments through one DockerSubstrate).

The engine is replaced after construction by an instrumented transport that records the timeout
each request was sent with and holds requests on events, so the interleaving is forced, not
hoped for."""

from __future__ import annotations

import json
import threading
from typing import Any

import requests
from requests.adapters import BaseAdapter

from polling import DEADLINE_S, joined
from rtax.substrates.base import Environment
from rtax.substrates.docker.substrate import DockerSubstrate

DEFAULT_S = 3600.0
CREATE_S = 120.0


class Engine(BaseAdapter):
    """A fake engine for one container ``c1``: answers by method and path, records
    (thread, method, path, timeout) for every request, and can hold one thread's create."""

    def __init__(self) -> None:
        super().__init__()
        self.sent: list[tuple[str, str, str, Any]] = []
        self.create_sent = threading.Event()
        self.release_create = threading.Event()
        self.removed = False

    def send(self, request: Any, **kwargs: Any) -> requests.Response:
        path = request.path_url.split("?")[0]
        path = "/" + path.lstrip("/").partition("/")[2] if path.startswith("/v1.") else path
        self.sent.append((threading.current_thread().name, request.method, path, kwargs["timeout"]))
        status, body = self._answer(request.method, path)
        response = requests.Response()
        response.status_code = status
        response._content = json.dumps(body).encode()
        response.headers["Content-Type"] = "application/json"
        response.url = request.url
        response.request = request
        return response

    def _answer(self, method: str, path: str) -> tuple[int, Any]:
        if method == "POST" and path == "/containers/create":
            self.create_sent.set()
            assert self.release_create.wait(DEADLINE_S), "the create was never released"
            return 201, {"Id": "c2"}
        if method == "POST" and path == "/containers/c1/start":
            return 204, None
        if method == "GET" and path == "/containers/c1/json":
            if self.removed:
                return 404, {"message": "No such container: c1"}
            return 200, {"State": {"Status": "running", "Running": True}}
        if method == "DELETE" and path == "/containers/c1":
            self.removed = True
            return 204, None
        if method == "GET" and path == "/containers/json":
            return 200, []
        return 500, {"message": f"unexpected {method} {path}"}

    def close(self) -> None:
        pass


def test_threads_sharing_a_docker_client_keep_their_own_call_timeouts(docker_api) -> None:
    sub = DockerSubstrate(api_timeout_s=DEFAULT_S, create_timeout_s=CREATE_S)
    engine = Engine()
    sub.api.mount("http+docker://", engine)
    failures: list[BaseException] = []

    def creating() -> None:
        try:
            sub.create("r2")
        except BaseException as exc:  # reported by the main thread
            failures.append(exc)

    # B: a create, held by the engine while its 120 s bound is in force.
    b = threading.Thread(target=creating, name="B")
    b.start()
    try:
        assert engine.create_sent.wait(DEADLINE_S), "B's create was never sent"
        # A, meanwhile: a start bounded by 7 s (no poll follows: the engine answers once it
        # runs), a removal bounded by 5 s and its verification.
        env = Environment(env_id="c1", run_id="r1", handle={"id": "c1"})
        sub.wait_running(env, 7)
        sub.destroy(env, 5)
    finally:
        engine.release_create.set()
        joined(b, "B's create")
    assert not failures
    sub.leftovers()  # after both: the client's default is what it was made with

    seen = [(who, method, path) for who, method, path, _ in engine.sent]
    assert ("B", "POST", "/containers/create") in seen
    bounds = {(who, method, path): timeout for who, method, path, timeout in engine.sent}
    assert bounds["B", "POST", "/containers/create"] == CREATE_S
    assert bounds["MainThread", "POST", "/containers/c1/start"] == 7
    assert bounds["MainThread", "DELETE", "/containers/c1"] == 5
    assert bounds["MainThread", "GET", "/containers/json"] == DEFAULT_S
    polls = [t for who, m, p, t in engine.sent if (who, p) == ("MainThread", "/containers/c1/json")]
    # only the removal is verified by polling, each poll bounded by what is left of its 5 s
    assert polls and all(1.0 <= t <= 5 for t in polls)
    sub.close()
