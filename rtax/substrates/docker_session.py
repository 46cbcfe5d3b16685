"""A persistent shell inside a container: the "low-latency action API" of session mode.

Why: one Docker exec per action costs an exec create, start and inspect each time; an agent
harness that keeps one shell open per container pays that once (README.md#action-modes). The shell
is ``/bin/sh`` started by one exec with stdin attached; each command is sent with framing:

    ( eval '<command>' ) </dev/null & echo $! > PIDFILE; wait $!; rc=$?
    printf '\\n<nonce> rc %d\\n' $rc; printf '\\n<nonce> end\\n' >&2

- The command runs in a forked subshell of its own (no exec: a fork is ~0.3 ms, a ``setsid sh``
  ~1.6 ms), so ``cd`` or variables never leak from one action into the next, as in exec mode.
- stdout and stderr come back separately (the engine's multiplexed stream), each ending with a
  marker line that carries a per-session random nonce; the exit code rides on the stdout marker.
- A timeout stops and kills the subshell's whole process tree (a separate exec walks it with
  ``pgrep -P``; without a terminal there is no job control for a process group) and drains to the
  markers, so the session stays usable; if it can't be drained, the session is closed and the
  next command opens a new one, and the `CommandTimeout` message says so.
"""

from __future__ import annotations

import contextlib
import re
import secrets
import select
import shlex
import socket
import struct
from typing import Any

from rtax.substrates.base import CommandResult, CommandTimeout, EnvironmentLost, ExecError, clock

_PIDFILE = "/tmp/.rtax-session-pid"
_DRAIN_S = 5.0
#: Stop, then kill, the timed-out subshell and every descendant, depth first.
_KILL_TREE = (
    "k() { kill -STOP $1 2>/dev/null; for c in $(pgrep -P $1); do k $c; done; "
    f"kill -9 $1 2>/dev/null; }}; k $(cat {_PIDFILE})"
)


class ShellSession:
    """One attached ``/bin/sh`` in a container, fed one framed command at a time."""

    def __init__(self, api: Any, container_id: str, sock: socket.socket, response: Any) -> None:
        self.api = api
        self.container_id = container_id
        self.sock = sock
        self._response = response  # keeps the hijacked HTTP connection alive
        self.nonce = "__rtax_" + secrets.token_hex(8)
        self._rc = re.compile(rf"\n{self.nonce} rc (\d+)\n".encode())
        self._end = f"\n{self.nonce} end\n".encode()
        self._buf = b""
        self.closed = False

    @classmethod
    def open(cls, api: Any, container_id: str) -> ShellSession:
        import docker.errors

        try:
            exec_id = api.exec_create(container_id, ["/bin/sh"], stdin=True, workdir="/work")
            response = api.exec_start(exec_id["Id"], socket=True)
        except docker.errors.NotFound as exc:
            raise EnvironmentLost(f"container {container_id[:12]} is gone") from exc
        except docker.errors.APIError as exc:
            if exc.status_code == 409:
                raise EnvironmentLost(str(exc.explanation)) from exc
            raise ExecError(f"session exec: {exc}") from exc
        sock = getattr(response, "_sock", response)
        sock.setblocking(True)
        return cls(api, container_id, sock, response)

    def run(self, command: str, timeout_s: float) -> CommandResult:
        if self.closed:
            raise ExecError("session is closed")
        t0 = clock()
        framed = (
            f"( eval {shlex.quote(command)} ) </dev/null & "
            f"echo $! > {_PIDFILE}; wait $!; __rtax_rc=$?; "
            f"printf '\\n{self.nonce} rc %d\\n' $__rtax_rc; "
            f"printf '\\n{self.nonce} end\\n' >&2\n"
        )
        try:
            self.sock.sendall(framed.encode())
        except OSError as exc:
            self.close()
            raise EnvironmentLost(f"session stream closed: {exc}") from exc
        try:
            out, err, code = self._read_until_markers(t0 + timeout_s)
        except TimeoutError:
            note = self._kill_and_drain()
            raise CommandTimeout(f"killed after {timeout_s:.3g} s; {note}") from None
        return CommandResult(code, out, err, clock() - t0)

    def _read_until_markers(self, deadline: float) -> tuple[str, str, int]:
        out, err = bytearray(), bytearray()
        code: int | None = None
        done_err = False
        while code is None or not done_err:
            stream, payload = self._frame(deadline)
            if stream == 2:
                err += payload
                if err.endswith(self._end):
                    del err[-len(self._end) :]
                    done_err = True
            else:
                out += payload
                match = self._rc.search(out)
                if match:
                    code = int(match.group(1))
                    del out[match.start() :]
        return out.decode("utf-8", "replace"), err.decode("utf-8", "replace"), code

    def _frame(self, deadline: float) -> tuple[int, bytes]:
        """One frame of the engine's multiplexed stream: 8-byte header, then the payload."""
        header = self._read_exactly(8, deadline)
        stream, size = header[0], struct.unpack(">I", header[4:8])[0]
        return stream, self._read_exactly(size, deadline)

    def _read_exactly(self, n: int, deadline: float) -> bytes:
        while len(self._buf) < n:
            left = deadline - clock()
            if left <= 0:
                raise TimeoutError
            ready, _, _ = select.select([self.sock], [], [], left)
            if not ready:
                raise TimeoutError
            chunk = self.sock.recv(65536)
            if not chunk:
                self.close()
                raise EnvironmentLost("session stream ended (container stopped?)")
            self._buf += chunk
        data, self._buf = self._buf[:n], self._buf[n:]
        return data

    def _kill_and_drain(self) -> str:
        """Kill the timed-out command's process group; keep the session if it drains."""
        try:
            kill = self.api.exec_create(self.container_id, ["/bin/sh", "-c", _KILL_TREE])
            self.api.exec_start(kill["Id"])
            self._read_until_markers(clock() + _DRAIN_S)
            return "session kept"
        except Exception:
            self.close()
            return "session replaced"

    def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        with contextlib.suppress(OSError):
            self.sock.shutdown(socket.SHUT_RDWR)
        try:
            self.sock.close()
        finally:
            close = getattr(self._response, "close", None)
            if close is not None:
                with contextlib.suppress(Exception):
                    close()
