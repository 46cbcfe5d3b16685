"""A real, small Ray cluster on this machine for the engine's tests: a head node and worker
nodes, each a `ray start --block` in a session of its own, labelled with its vantage.

Token authentication is off, said explicitly (`environ`), so that a token file of the user's
(``~/.ray/auth_token``) does not turn it on for some processes and not others: the driver is
the test's own process, whose Ray reads its authentication mode once, when first imported. The
cluster lives for one test module.

Why sessions: every process of a node (raylet, agents, the workers that run rollouts) stays in
the session of the `ray start` that this harness started, so a node is killed (a lost node) or
stopped by the ids of exactly those processes: never `ray stop`, which stops every Ray process
on the machine, whoever started it.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from polling import wait_for

RAY = str(Path(sys.executable).with_name("ray"))
#: Small on purpose: the machine is shared, probes reserve no CPU (num_cpus=0).
NODE_ARGS = ["--num-cpus", "1", "--object-store-memory", str(80 * 1024 * 1024)]
LABEL = "rtax.io/vantage"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def session_pids(sid: int) -> list[int]:
    """The processes whose session is `sid` (a node's `ray start` and all it started)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            # fields after the command (which may hold spaces) start after its last ')'
            fields = (entry / "stat").read_text().rpartition(")")[2].split()
        except OSError:
            continue
        if int(fields[3]) == sid and fields[0] != "Z":
            found.append(int(entry.name))
    return found


@dataclass
class Node:
    vantage: str
    proc: subprocess.Popen[bytes]
    temp: Path
    logfile: Path

    def pids(self) -> list[int]:
        return session_pids(self.proc.pid)

    def owns(self, pid: int) -> bool:
        """Whether `pid` (a Ray worker, say) is one of this node's processes."""
        return pid in self.pids()

    def kill(self) -> None:
        """Lose the node: SIGKILL to every one of its processes at once."""
        for pid in self.pids():
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        self._reap()

    def stop(self) -> None:
        """Stop the node: SIGTERM to its `ray start` (it stops what it started), then SIGKILL
        to whatever of its session is left."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.proc.wait(15)
        self.kill()

    def _reap(self) -> None:
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(15)
        wait_for(lambda: not self.pids(), f"the {self.vantage} node's processes to end")


@dataclass
class Cluster:
    """Start with `head`, then `add`; `stop` ends every node it started."""

    root: Path = field(default_factory=lambda: Path(tempfile.mkdtemp(prefix="rtax-ray-")))
    port: int = field(default_factory=free_port)
    nodes: list[Node] = field(default_factory=list)

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    @property
    def environ(self) -> dict[str, str]:
        """What a process needs in its environment to join this cluster."""
        return {"RAY_AUTH_MODE": "disabled"}

    def _start(self, vantage: str, args: list[str], env: Mapping[str, str]) -> Node:
        temp = self.root / f"{vantage}-{len(self.nodes)}"  # short: Ray's socket paths are
        temp.mkdir()
        logfile = temp.with_suffix(".log")
        cmd = [RAY, "start", "--block", *NODE_ARGS, "--temp-dir", str(temp)]
        cmd += ["--labels", f"{LABEL}={vantage}", "--disable-usage-stats", *args]
        environ = {**os.environ, "RAY_USAGE_STATS_ENABLED": "0", **self.environ, **env}
        with open(logfile, "wb") as out:
            proc = subprocess.Popen(
                cmd, stdout=out, stderr=subprocess.STDOUT, env=environ, start_new_session=True
            )
        node = Node(vantage, proc, temp, logfile)
        self.nodes.append(node)

        def started() -> bool:
            if proc.poll() is not None:
                raise RuntimeError(f"ray start exited: {logfile.read_text()[-2000:]}")
            return "Ray runtime started" in logfile.read_text(errors="replace")

        wait_for(started, f"the {vantage} node to start", interval_s=0.25)
        return node

    def head(self, vantage: str, env: Mapping[str, str] | None = None) -> Node:
        args = ["--head", "--port", str(self.port), "--include-dashboard", "false"]
        args += ["--dashboard-agent-listen-port", str(free_port())]
        return self._start(vantage, args, env or {})

    def add(self, vantage: str, env: Mapping[str, str] | None = None) -> Node:
        args = ["--address", self.address, "--dashboard-agent-listen-port", str(free_port())]
        return self._start(vantage, args, env or {})

    def node(self, vantage: str) -> Node:
        return next(n for n in self.nodes if n.vantage == vantage and n.proc.poll() is None)

    def stop(self) -> None:
        """Workers first, the head last; then nothing of any node may be left running."""
        for node in reversed(self.nodes):
            node.stop()
        left = [pid for node in self.nodes for pid in node.pids()]
        shutil.rmtree(self.root, ignore_errors=True)
        assert not left, f"Ray processes left running: {left}"
