"""A persistent shell inside a container: the "low-latency action API" of session mode.

Why: one Docker exec per action costs an exec create, start and inspect each time; an agent
harness that keeps one shell open per container pays that once
(docs/substrates/docker.md#action-modes). The shell is ``bash`` with job control on (``set -m``),
started by one exec with stdin attached; each command is sent with framing:

    ( eval '<command>' ) </dev/null & p=$!; echo $p > PIDFILE; wait $p; rc=$?
    while kill -0 -$p; do sleep 0.01; done          # until its whole process group is gone
    printf '\\n<nonce> rc %d\\n' $rc; printf '\\n<nonce> end\\n' >&2

Job control gives each command's subshell a process group of its own without an exec (a fork
is ~0.3 ms, ``setsid sh -c`` ~1.6 ms), which is what a timeout kills (``kill -9 -PGID`` by a
separate exec) before draining to the markers. The markers carry a per-session random nonce, so
no command's output can forge them; stdout and stderr come apart on the engine's multiplexed
stream.
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

from rtax.core.failures import CommandTimeout, EnvironmentLost, ExecError
from rtax.substrates.base import CommandResult, clock

_PIDFILE = "/tmp/.rtax-session-pid"
_DRAIN_S = 5.0
_KILL_GROUP = f"kill -9 -$(cat {_PIDFILE})"
#: Output kept per stream and command (the rest is counted, not kept): half head, half tail.
MAX_OUTPUT = 4 * 1024 * 1024


class _Stream:
    """One output stream of one command: capped buffer, exact byte count, marker search."""

    def __init__(self, marker: re.Pattern[bytes], keep: int) -> None:
        self.marker = marker
        self.keep = keep
        self.head = bytearray()
        self.tail = bytearray()
        self.total = 0
        self.match: re.Match[bytes] | None = None
        self._window = 256  # the marker line is shorter than this

    def feed(self, payload: bytes) -> None:
        self.tail += payload
        # Search only the end of the buffer: the marker is the last thing the shell prints.
        start = max(len(self.tail) - len(payload) - self._window, 0)
        self.match = self.marker.search(self.tail, start)
        if self.match is None and len(self.tail) > self.keep // 2 + self._window + (1 << 16):
            self._spill()  # in 64 KiB batches, so that the copy is rare

    def _spill(self) -> None:
        """Keep the first keep/2 bytes and the last keep/2 (plus the search window)."""
        half = self.keep // 2
        overflow = len(self.tail) - half - self._window
        if overflow <= 0:
            return
        take = min(max(half - len(self.head), 0), overflow)
        self.head += self.tail[:take]
        self.total += overflow
        del self.tail[:overflow]

    def result(self) -> tuple[str, int]:
        assert self.match is not None
        body = bytes(self.tail[: self.match.start()])
        size = self.total + len(body)
        # The last payload may have brought more than a spill batch: cap the tail here too.
        half = self.keep // 2
        take = min(max(half - len(self.head), 0), max(len(body) - half, 0))
        text, body = bytes(self.head) + body[:take], body[take:]
        if len(body) > half:
            body = body[len(body) - half :]
        dropped = size - len(text) - len(body)
        if dropped > 0:
            text += f"\n[... {dropped} bytes not kept ...]\n".encode()
        text += body
        return text.decode("utf-8", "replace"), size


class ShellSession:
    """One attached ``bash`` in a container, fed one framed command at a time."""

    def __init__(self, api: Any, container_id: str, sock: socket.socket, response: Any) -> None:
        self.api = api
        self.container_id = container_id
        self.sock = sock
        self._response = response  # keeps the hijacked HTTP connection alive
        self.nonce = "__rtax_" + secrets.token_hex(8)
        self._rc = re.compile(rf"\n{self.nonce} rc (\d+)\n".encode())
        self._end = re.compile(rf"\n{self.nonce} end\n".encode())
        self._buf = b""
        self.closed = False
        self.last_sizes = (0, 0)

    @classmethod
    def open(cls, api: Any, container_id: str) -> ShellSession:
        import docker.errors

        try:
            exec_id = api.exec_create(
                container_id, ["bash", "--noprofile", "--norc"], stdin=True, workdir="/work"
            )
            response = api.exec_start(exec_id["Id"], socket=True)
        except docker.errors.NotFound as exc:
            raise EnvironmentLost(f"container {container_id[:12]} is gone") from exc
        except docker.errors.APIError as exc:
            if exc.status_code == 409:
                raise EnvironmentLost(str(exc.explanation)) from exc
            raise ExecError(f"session exec: {exc}") from exc
        sock = getattr(response, "_sock", response)
        sock.setblocking(True)
        session = cls(api, container_id, sock, response)
        session._send("set -m\n")
        return session

    def _send(self, text: str) -> None:
        try:
            self.sock.sendall(text.encode())
        except OSError as exc:
            self.close()
            raise self._lost(f"session stream closed: {exc}") from exc

    def run(self, command: str, timeout_s: float) -> CommandResult:
        if self.closed:
            raise ExecError("session is closed")
        t0 = clock()
        self._send(
            f"( eval {shlex.quote(command)} ) </dev/null & __p=$!; echo $__p > {_PIDFILE}; "
            f"wait $__p; __rc=$?; "
            f"while kill -0 -$__p 2>/dev/null; do sleep 0.01; done; "
            f"printf '\\n{self.nonce} rc %d\\n' $__rc; printf '\\n{self.nonce} end\\n' >&2\n"
        )
        try:
            out, err, code = self._read_until_markers(t0 + timeout_s)
        except TimeoutError:
            note = self._kill_and_drain()
            raise CommandTimeout(f"killed after {timeout_s:.3g} s; {note}") from None
        return CommandResult(code, out, err, clock() - t0, *self.last_sizes)

    def _read_until_markers(self, deadline: float) -> tuple[str, str, int]:
        out, err = _Stream(self._rc, MAX_OUTPUT), _Stream(self._end, MAX_OUTPUT)
        while out.match is None or err.match is None:
            stream, payload = self._frame(deadline)
            (err if stream == 2 else out).feed(payload)
        assert out.match is not None
        code = int(out.match.group(1))
        out_text, out_size = out.result()
        err_text, err_size = err.result()
        self.last_sizes = (out_size, err_size)
        return out_text, err_text, code

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
            chunk = self.sock.recv(1 << 20)
            if not chunk:
                self.close()
                raise self._lost("session stream ended")
            self._buf += chunk
        data, self._buf = self._buf[:n], self._buf[n:]
        return data

    def _lost(self, why: str) -> Exception:
        """The shell is gone: the environment is lost only if the container is not running."""
        with contextlib.suppress(Exception):
            if self.api.inspect_container(self.container_id)["State"].get("Running"):
                return ExecError(
                    f"{why}; the container still runs (the shell exited), "
                    "the next command opens a new session"
                )
        return EnvironmentLost(f"{why} (container {self.container_id[:12]} is not running)")

    def _kill_and_drain(self) -> str:
        """Kill the timed-out command's process group; keep the session if it drains."""
        try:
            kill = self.api.exec_create(self.container_id, ["/bin/sh", "-c", _KILL_GROUP])
            self.api.exec_start(kill["Id"])
            self._read_until_markers(clock() + _DRAIN_S)
            return "session kept"
        except Exception:  # any failure here means the session is unusable
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
