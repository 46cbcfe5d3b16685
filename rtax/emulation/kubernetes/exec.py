"""Exec over WebSocket: the channel protocol the client speaks to run a command in a pod.

Why (docs/emulations.md): the `kubernetes` substrate runs every command through the official
client's ``stream`` over the API server's WebSocket, and reads the exit code where a real server
puts it. Subprotocols ``v5.channel.k8s.io`` and ``v4.channel.k8s.io`` (the first one the client
offers wins, as in the API server): stdout on channel 1, stderr on channel 2, and on channel 3
the v1 ``Status`` (``Success``, or ``NonZeroExitCode`` with the exit code as the cause message,
which is where the client reads it). Not modelled: stdin/tty, resize, the old ``channel.k8s.io``
protocol, and output streaming (the output is sent when the command ends). An exec the server
refuses is answered with an HTTP error instead of the upgrade.
"""

from __future__ import annotations

import json
import shlex
from typing import Any

from rtax.emulation.kubernetes.api import is_true, status_body

#: An exec has no timeout of its own in Kubernetes; this only bounds a forgotten command.
_EXEC_LIMIT_S = 24 * 3600.0
_CHUNK = 32 * 1024
_PROTOCOLS = ("v5.channel.k8s.io", "v4.channel.k8s.io")


async def refuse(ws: Any, code: int, reason: str, message: str) -> None:
    """Answer the upgrade request with an HTTP error (a v1 Status), as the API server does."""
    from starlette.responses import JSONResponse

    await ws.send_denial_response(JSONResponse(status_body(code, reason, message), code))


async def run_exec(ws: Any, pod: dict[str, Any], env: Any, sub: Any, negotiated: list[str]) -> None:
    """One command over a v4/v5 channel WebSocket, run in the pod's real container `env` (an
    environment of the Docker substrate `sub`); the chosen subprotocol is appended to
    `negotiated`."""
    from starlette.concurrency import run_in_threadpool

    name = pod["metadata"]["name"]
    command = ws.query_params.getlist("command")
    if not command:
        await refuse(ws, 400, "BadRequest", "you must specify at least 1 command")
        return
    if is_true(ws.query_params.get("stdin")) or is_true(ws.query_params.get("tty")):
        await refuse(ws, 400, "BadRequest", "stdin and tty are not supported by this emulation")
        return
    if env is None or pod["status"].get("phase") != "Running":
        phase = pod["status"].get("phase")
        await refuse(
            ws,
            400,
            "BadRequest",
            f'container "main" in pod "{name}" is not running (phase {phase})',
        )
        return
    offered = ws.scope.get("subprotocols") or []
    chosen = next((p for p in offered if p in _PROTOCOLS), None)
    if chosen is None:
        await refuse(ws, 400, "BadRequest", f"no supported subprotocol in {offered}")
        return
    negotiated.append(chosen)
    await ws.accept(subprotocol=chosen)
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
