"""One action in a sandbox, in either mode: ``exec`` (a process call per action) or ``session``
(one Daytona session per sandbox).

Why a module of its own: each mode has to undo something of Daytona's API (exec mixes the two
streams and runs without a shell; sessions have no timeout), and that is the whole of what differs
between them (docs/substrates/daytona.md#action-modes). In both, the command's timeout is the
kit's ``timeout`` wrapper inside the sandbox, because the daemon's own is whole seconds; the
daemon's and the HTTP timeouts are only backstops. The calls' errors leave here as the SDK raised
them: the substrate classifies them.
"""

from __future__ import annotations

import math
import re
import secrets
import shlex
from collections.abc import Callable
from typing import Any

from rtax.core.failures import ExecError
from rtax.substrates import kit
from rtax.substrates.base import CommandResult, Environment, clock

#: `call(what, fn, within_s)`: `fn()` under the substrate's rate-limit policy, for this env.
Call = Callable[[str, Callable[[], Any], float], Any]

#: Margin of the daemon's timeout past the command's in exec mode (`kit.call_timeout`).
EXEC_MARGIN_S = 2.0
#: Margin of the HTTP call past the command's in session mode.
SESSION_MARGIN_S = 30.0


class Streams:
    """Exec mode's separation of stdout from stderr, with a marker of its own (random per
    substrate, so that no command's output can fake it)."""

    def __init__(self) -> None:
        self.nonce = "__rtax_" + secrets.token_hex(8)
        self._marker = re.compile(rf"\n{self.nonce} rc (\d+)\n")

    def command_line(self, command: str, timeout_s: float) -> str:
        """`command` under ``timeout``, its stderr after the marker. Daytona's daemon splits
        the line on spaces outside quotes: shlex quoting is understood by it and a shell alike."""
        script = (
            f'e=/tmp/.rtax-stderr.$$; {kit.timeout_command(command, timeout_s)} 2>"$e"; '
            f'rc=$?; printf "\\n%s rc %d\\n" {self.nonce} "$rc"; '
            f'[ -s "$e" ] && cat "$e"; rm -f "$e"; exit "$rc"'
        )
        return f"/bin/sh -c {shlex.quote(script)}"

    def result(self, output: str, code: int | None, latency: float) -> CommandResult:
        """The command's result from the combined output."""
        match = self._marker.search(output)
        if match is None or code is None:
            raise ExecError(f"exec returned exit {code} without rtax's marker: {output[-200:]!r}")
        return CommandResult(code, output[: match.start()], output[match.end() :], latency)


def run_exec(
    env: Environment, command: str, timeout_s: float, *, workdir: str, streams: Streams, call: Call
) -> CommandResult:
    """One ``sandbox.process.exec``."""
    sandbox = env.handle["sandbox"]
    line = streams.command_line(command, timeout_s)
    backstop = math.ceil(kit.call_timeout(timeout_s, EXEC_MARGIN_S))  # whole seconds
    t0 = clock()
    response = call(
        "exec", lambda: sandbox.process.exec(line, cwd=workdir, timeout=backstop), timeout_s
    )
    latency = clock() - t0
    kit.raise_if_timed_out(response.exit_code, latency, timeout_s)
    return streams.result(response.result or "", response.exit_code, latency)


def open_session(env: Environment, call: Call, timeout_s: float) -> str:
    """The sandbox's session, created on its first command."""
    session_id = env.handle.get("session_id")
    if session_id is None:
        session_id = f"rtax-{secrets.token_hex(6)}"
        sandbox = env.handle["sandbox"]
        call("create session", lambda: sandbox.process.create_session(session_id), timeout_s)
        env.handle["session_id"] = session_id
        env.mark("session_opened")
    return session_id


def run_session(
    env: Environment, session_id: str, command: str, timeout_s: float, *, workdir: str, call: Call
) -> CommandResult:
    """One synchronous ``execute_session_command`` (each in its own child shell)."""
    from daytona.common.process import SessionExecuteRequest

    sandbox = env.handle["sandbox"]
    inner = f"cd {shlex.quote(workdir)} || exit 125\n{command}"
    request = SessionExecuteRequest(command=kit.timeout_command(inner, timeout_s), run_async=False)
    backstop = math.ceil(kit.call_timeout(timeout_s, SESSION_MARGIN_S))
    t0 = clock()
    response = call(
        "session exec",
        lambda: sandbox.process.execute_session_command(session_id, request, timeout=backstop),
        timeout_s,
    )
    latency = clock() - t0
    kit.raise_if_timed_out(response.exit_code, latency, timeout_s)
    if response.exit_code is None:
        raise ExecError("session command finished without an exit code")
    return CommandResult(response.exit_code, response.stdout or "", response.stderr or "", latency)
