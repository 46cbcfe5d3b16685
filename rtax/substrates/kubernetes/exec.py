"""One command through the exec WebSocket, bounded from the connect to the last frame.

Why this much code for an exec: the client connects its WebSocket with no timeout at all
(``_request_timeout`` only bounds a preloaded read) and reads frames with none either, so a
silent API would hang a rollout. Here the TCP connect and the upgrade get a socket timeout
(`_bound_websocket_connect`), every frame read is bounded by the command's deadline
(`kit.call_timeout`), and the command itself runs under ``timeout`` in the pod
(`kit.timeout_argv`). The answer is read from the channels: stdout and stderr apart, the exit
code from the status channel's v1 Status. A refused upgrade is classified here, since only its
status line says why.
"""

from __future__ import annotations

import contextlib
import json
import re
import threading
from typing import Any

from rtax.core.failures import (
    CommandTimeout,
    EnvironmentLost,
    ExecError,
    RateLimited,
    SubstrateError,
)
from rtax.substrates import kit
from rtax.substrates.base import CommandResult, Environment, clock
from rtax.substrates.kubernetes.client import Api, k8s, reason
from rtax.substrates.kubernetes.pod import CONTAINER

PROTOCOLS = {"v4": "v4.channel.k8s.io", "v5": "v5.channel.k8s.io"}
#: How long past a command's timeout the WebSocket is waited for before it is closed.
WS_MARGIN_S = 10.0
#: Exec refusals worth retrying: a container not there yet or a stale kubelet (400), a pod the
#: API still has but the kubelet not (404), a timeout (408), rate limiting (429).
RETRYABLE = {400, 404, 408, 429}


class ExecRefused(ExecError):
    """The API refused an exec for good (403 forbidden, ...): ``exec_error``, and permanent,
    so the probe runner's ready phase stops at once instead of retrying a refusal until it
    becomes a ``ready_timeout`` much later."""

    permanent = True


def run(
    api: Api, exec_api: Any, env: Environment, command: str, timeout_s: float, protocol: str | None
) -> CommandResult:
    """Run `command` in the pod of `env` with `exec_api` (a CoreV1Api of this thread's own)."""
    t0 = clock()
    deadline = t0 + kit.call_timeout(timeout_s, WS_MARGIN_S)
    argv = kit.timeout_argv(command, timeout_s)
    ws = _open(api, exec_api, env, argv, (t0, t0 + timeout_s, deadline), protocol)
    out, err, raw_status = _read(api, env, ws, deadline, deadline - t0)
    latency = clock() - t0
    code = exit_code(raw_status)
    if code is None:
        raise failure(api, env, f"exec ended without an exit status ({raw_status[:200]!r})")
    kit.raise_if_timed_out(code, latency, timeout_s)
    result = CommandResult(
        code, out.decode("utf-8", "replace"), err.decode("utf-8", "replace"), latency
    )
    return kit.first_command(env, result)


def _open(
    api: Api,
    exec_api: Any,
    env: Environment,
    argv: list[str],
    times: tuple[float, float, float],
    protocol: str | None,
) -> Any:
    """The exec's WebSocket, its upgrade retried on 429 until the command's own timeout.
    `times`: the command's start, its timeout and the end of the whole exec's budget."""
    lib = k8s()
    t0, timeout_end, budget_end = times
    headers = {"sec-websocket-protocol": PROTOCOLS[protocol]} if protocol else None
    connect_s = api.api_timeout_s
    _bound_websocket_connect()

    def connect() -> Any:
        nonlocal connect_s
        # The TCP connect and the upgrade handshake: at most api_timeout_s, within budget.
        connect_s = max(min(api.api_timeout_s, budget_end - clock()), 0.001)
        _WS_TIMEOUT.seconds = connect_s
        try:
            # The client loses a failed handshake's ApiException while decoding its (None)
            # body, raising AttributeError from it: `_refusal` finds it in the chain.
            return lib.stream.stream(
                exec_api.connect_get_namespaced_pod_exec,
                env.env_id,
                api.namespace,
                container=CONTAINER,
                command=argv,
                stdin=False,
                stdout=True,
                stderr=True,
                tty=False,
                binary=True,
                _preload_content=False,
                **({"_headers": headers} if headers else {}),
            )
        finally:
            _WS_TIMEOUT.seconds = None

    try:
        return api.policy.call(
            connect,
            what="exec",
            limited=lambda exc: _handshake_status(_refusal(exc)) == 429,
            retry_after=lambda exc: None,  # a refused upgrade's headers are not kept
            detail=lambda exc: "HTTP 429",
            deadline=min(timeout_end, t0 + api.policy.deadline_s),
            on_wait=env.rate_limit_waits.append,
        )
    except RateLimited as exc:
        raise exc from None
    except Exception as error:
        exc = _refusal(error)
        if exc is None:
            raise
        status = _handshake_status(exc)
        if status is None and _is_ws_timeout(exc):
            raise ExecError(
                f"exec: no answer to the WebSocket upgrade within {connect_s:.3g} s"
            ) from None
        message = f"exec refused: {reason(exc)[:300]}"
        found = failure(api, env, message)
        permanent = status is not None and 400 <= status < 500 and status not in RETRYABLE
        if permanent and type(found) is ExecError:
            raise ExecRefused(message) from None
        raise found from None


def _read(
    api: Api, env: Environment, ws: Any, deadline: float, budget: float
) -> tuple[bytes, bytes, bytes]:
    """stdout, stderr and the status channel once the stream ends, by `deadline` at most (the
    command's start + `budget`)."""
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
        return ws.read_channel(1) or b"", ws.read_channel(2) or b"", ws.read_channel(3) or b""
    except CommandTimeout:
        raise
    except Exception as exc:
        if _is_ws_timeout(exc):  # a frame begun and never finished by the deadline
            raise CommandTimeout(
                f"no exit status {budget:.3g} s after the command started (a frame stalled); "
                "stream closed"
            ) from None
        raise failure(api, env, f"exec stream: {type(exc).__name__}: {exc}") from None
    finally:
        with contextlib.suppress(Exception):
            ws.close()


def failure(api: Api, env: Environment, message: str) -> SubstrateError:
    """`EnvironmentLost` if the pod is gone or no longer running, else `ExecError`."""
    try:
        pod = api.get(env.env_id, ExecError, api.api_timeout_s)
    except SubstrateError:
        return ExecError(message)
    if pod is None:
        return EnvironmentLost(f"pod {env.env_id} is gone ({message})")
    phase = (pod.get("status") or {}).get("phase")
    if phase != "Running" or pod["metadata"].get("deletionTimestamp"):
        return EnvironmentLost(f"pod {env.env_id} is {phase} ({message})")
    return ExecError(message)


def exit_code(raw: bytes) -> int | None:
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


def _refusal(exc: BaseException | None) -> Any:
    """`exc` or the first ApiException in its context chain (a refused upgrade), else None."""
    while exc is not None and not isinstance(exc, k8s().client.ApiException):
        exc = exc.__context__
    return exc


def _handshake_status(exc: Any) -> int | None:
    match = re.search(r"Handshake status (\d{3})", str(getattr(exc, "reason", "") or ""))
    return int(match.group(1)) if match else None


def _is_ws_timeout(exc: BaseException | None) -> bool:
    """Whether `exc` or an exception it arose from is a socket or WebSocket timeout."""
    from websocket import WebSocketTimeoutException

    while exc is not None:
        if isinstance(exc, (TimeoutError, WebSocketTimeoutException)):
            return True
        exc = exc.__context__
    return False
