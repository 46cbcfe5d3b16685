"""The toolbox (the daemon in every sandbox): process execute, sessions and their commands.

Why (docs/emulations.md): the SDK runs a rollout's commands here, so they must behave as the
daemon's do. ``POST /process/execute``: the command split by the daemon's own quote-aware
splitter (`parse_command`), run without a shell, stdout and stderr combined into ``result``,
killed at ``timeout`` seconds with HTTP 408. Sessions: create, get, list, delete, ``exec``
(sync and ``runAsync``), command status and command logs with separate stdout and stderr.
Session commands run in a subshell of one persistent bash (`rtax.substrates.docker.session`), so
``cd`` does not carry over as it would in Daytona's; the daemon's 50 ms exit-code polling in
sessions is not modelled.
"""

from __future__ import annotations

import shlex
import threading
import uuid
from dataclasses import dataclass, field
from typing import Any

from rtax.core.failures import CommandTimeout, SubstrateError
from rtax.emulation.daytona.api import HttpError
from rtax.emulation.daytona.sandboxes import Sandbox, Sandboxes

#: The daemon runs process.execute without a timeout when none is given; the emulation bounds it.
NO_TIMEOUT_S = 3600.0

Answer = tuple[int, Any]


def parse_command(command: str) -> list[str]:
    """Split a command as the Daytona daemon does (process/execute): on spaces outside quotes;
    single or double quotes group, the other quote character is literal inside, no escapes."""
    args: list[str] = []
    current: list[str] = []
    quote: str | None = None
    for ch in command:
        if ch in "\"'":
            if quote is None:
                quote = ch
            elif quote == ch:
                quote = None
            else:
                current.append(ch)
        elif ch == " " and quote is None:
            if current:
                args.append("".join(current))
                current = []
        else:
            current.append(ch)
    if current:
        args.append("".join(current))
    return args


@dataclass
class Command:
    id: str
    command: str
    exit_code: int | None = None
    stdout: str = ""
    stderr: str = ""


@dataclass
class Session:
    shell: Any  # rtax.substrates.docker.session.ShellSession
    commands: dict[str, Command] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)


class Toolbox:
    """The toolbox routes, on the started sandboxes of `sandboxes`. Each handler takes the
    route's path parameters, query and JSON body and returns (HTTP status, JSON or None)."""

    def __init__(self, sandboxes: Sandboxes) -> None:
        self.sandboxes = sandboxes

    def execute(self, path: dict, query: dict, body: dict) -> Answer:
        sandbox = self.sandboxes.running(path["sid"])
        argv = parse_command(body.get("command") or "")
        if not argv:
            raise HttpError(400, "empty command")
        timeout = body.get("timeout")
        limit = float(timeout) if isinstance(timeout, int) and timeout > 0 else NO_TIMEOUT_S
        script = "exec 2>&1; exec " + shlex.join(argv)  # one buffer for both, as the daemon
        if body.get("cwd"):
            script = f"cd {shlex.quote(body['cwd'])} || exit 1; {script}"
        try:
            result = self.sandboxes.backing.run(sandbox.env, script, limit)
        except CommandTimeout:
            raise HttpError(
                408,
                f"Command execution timed out after {timeout} seconds. The timeout can be "
                "increased by adjusting the timeout parameter in the request.",
            ) from None
        except SubstrateError as exc:
            raise HttpError(400, str(exc)) from None
        return 200, {"exitCode": result.exit_code, "result": result.stdout + result.stderr}

    def metrics(self, path: dict, query: dict, body: Any) -> Answer:
        """``GET /system/metrics`` (the SDK's ``get_metrics_latest``): the container's memory
        from the engine's one-shot stats (usage less the inactive page cache, as ``docker
        stats`` shows it) and its limit, its CPUs. Not modelled: CPU utilisation (a one-shot
        sample has no second reading to take a rate from) and the disk. A paused sandbox's
        daemon is frozen with it: like every toolbox call, this one needs a started sandbox."""
        from datetime import UTC, datetime

        from rtax.substrates.docker import daemon
        from rtax.substrates.docker.substrate import held_memory

        sandbox = self.sandboxes.running(path["sid"])
        assert sandbox.env is not None
        try:
            with daemon.call_timeout(60):
                stats = self.sandboxes.backing.api.stats(
                    sandbox.env.env_id, stream=False, one_shot=True
                )
        except Exception as exc:  # the engine's answer, as the daemon would fail
            raise HttpError(500, f"metrics: {exc}") from None
        memory = stats.get("memory_stats") or {}
        cache = (memory.get("stats") or {}).get("inactive_file")
        now = datetime.now(UTC)
        return 200, {
            "cpuCount": (stats.get("cpu_stats") or {}).get("online_cpus"),
            "memTotal": memory.get("limit"),
            "memUsed": held_memory(memory),
            "memCache": cache if isinstance(cache, int) else None,
            "timestamp": now.isoformat(),
            "timestampUnix": int(now.timestamp()),
        }

    def session_create(self, path: dict, query: dict, body: dict) -> Answer:
        from rtax.substrates.docker.session import ShellSession

        sandbox = self.sandboxes.running(path["sid"])
        session_id = body.get("sessionId")
        if not session_id:
            raise HttpError(400, "sessionId is required")
        if session_id in sandbox.sessions:
            raise HttpError(409, "session already exists")
        assert sandbox.env is not None
        try:
            shell = ShellSession.open(self.sandboxes.backing.api, sandbox.env.env_id)
        except SubstrateError as exc:
            raise HttpError(500, str(exc)) from None
        sandbox.sessions[session_id] = Session(shell)
        return 201, None

    def session_list(self, path: dict, query: dict, body: Any) -> Answer:
        sandbox = self.sandboxes.running(path["sid"])
        return 200, [_session_view(k, s) for k, s in sandbox.sessions.items()]

    def session_get(self, path: dict, query: dict, body: Any) -> Answer:
        _, session = self._session(path)
        return 200, _session_view(path["session"], session)

    def session_delete(self, path: dict, query: dict, body: Any) -> Answer:
        sandbox, session = self._session(path)
        session.shell.close()
        sandbox.sessions.pop(path["session"], None)
        return 204, None

    def session_exec(self, path: dict, query: dict, body: dict) -> Answer:
        _, session = self._session(path)
        command = (body.get("command") or "").strip()
        if not command:
            raise HttpError(400, "command cannot be empty")
        cmd = Command(id=str(uuid.uuid4()), command=command)
        session.commands[cmd.id] = cmd
        if body.get("runAsync") or body.get("async"):
            assert self.sandboxes.pool is not None
            self.sandboxes.pool.submit(self._session_run, session, cmd)
            return 202, {"cmdId": cmd.id}
        self._session_run(session, cmd)
        return 200, {
            "cmdId": cmd.id,
            "exitCode": cmd.exit_code,
            "output": cmd.stdout + cmd.stderr,
            "stdout": cmd.stdout,
            "stderr": cmd.stderr,
        }

    def command_get(self, path: dict, query: dict, body: Any) -> Answer:
        cmd = self._command(path)
        return 200, {"id": cmd.id, "command": cmd.command, "exitCode": cmd.exit_code}

    def command_logs(self, path: dict, query: dict, body: Any) -> Answer:
        cmd = self._command(path)
        return 200, {"output": cmd.stdout + cmd.stderr, "stdout": cmd.stdout, "stderr": cmd.stderr}

    def _session(self, path: dict) -> tuple[Sandbox, Session]:
        sandbox = self.sandboxes.running(path["sid"])
        session = sandbox.sessions.get(path["session"])
        if session is None:
            raise HttpError(404, "session not found")
        return sandbox, session

    def _command(self, path: dict) -> Command:
        _, session = self._session(path)
        cmd = session.commands.get(path["cmd"])
        if cmd is None:
            raise HttpError(404, "command not found")
        return cmd

    @staticmethod
    def _session_run(session: Session, cmd: Command) -> None:
        """One command in the session's shell; the daemon has no per-command timeout."""
        with session.lock:
            try:
                result = session.shell.run(cmd.command, NO_TIMEOUT_S)
            except SubstrateError as exc:
                cmd.exit_code, cmd.stderr = 1, f"session cancelled: {exc}"
                return
            cmd.stdout, cmd.stderr, cmd.exit_code = result.stdout, result.stderr, result.exit_code


def _session_view(session_id: str, session: Session) -> dict[str, Any]:
    commands = [
        {"id": c.id, "command": c.command, "exitCode": c.exit_code}
        for c in session.commands.values()
    ]
    return {"sessionId": session_id, "commands": commands}
