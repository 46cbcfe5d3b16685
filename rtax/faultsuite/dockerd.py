"""A private Docker engine for the fault suite, which it may restart mid-run.

Why (docs/faults.md): "dockerd restarted mid-run" is one of the faults, and the engine a user
(or a fellow developer) runs must never be restarted by a test. So the suite starts a dockerd of
its own: its own socket, data root, exec root, pidfile, bridge and daemon.json (runsc registered
the way `scripts/ensure-docker.sh` registers it on the system engine), with the runner image
copied in from the system engine (`docker save | docker load`). Everything the suite runs talks to
it through ``DOCKER_HOST``. It runs with ``--iptables=false``: the system engine owns the host's
firewall chains, and containers reach T2's git server on the bridge's own address, which needs
no NAT. `close` stops it and removes every file, mount and interface it made, whatever happened.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import time
from pathlib import Path

from rtax.assets.image import RUNNER_IMAGE

#: The bridge the private engine's containers use; made by the suite, removed at the end.
BRIDGE = "rtaxfault0"
BRIDGE_CIDR = "10.213.7.1/24"
#: runsc as `scripts/ensure-docker.sh` registers it (systrap, the container's network).
RUNSC = {"path": "/usr/local/bin/runsc", "runtimeArgs": ["--network=host", "--platform=systrap"]}
START_TIMEOUT_S = 60.0
STOP_TIMEOUT_S = 30.0


class DockerdError(RuntimeError):
    """The private engine could not be started or stopped."""


def _run(argv: list[str], timeout: float = 60.0) -> subprocess.CompletedProcess:
    return subprocess.run(argv, capture_output=True, text=True, timeout=timeout, check=False)


class PrivateEngine:
    """A dockerd under `root` (a fresh directory), reachable at `host` (a ``unix://`` URL)."""

    def __init__(self, root: Path, *, log: object = print) -> None:
        self.root = root
        self.socket = root / "docker.sock"
        self.host = f"unix://{self.socket}"
        self.log = log
        self._proc: subprocess.Popen | None = None
        self._log_file: object = None
        self.restarts = 0
        self._bridge = False  # made by this run (and so removed by it)

    # -- life ------------------------------------------------------------------------------

    def start(self) -> None:
        """Make the bridge and start dockerd; return once it answers."""
        self.root.mkdir(parents=True, exist_ok=True)
        if not shutil.which("dockerd"):
            raise DockerdError("no dockerd on this machine (run: make docker)")
        if _run(["ip", "link", "show", BRIDGE]).returncode == 0:
            # never share (or, at the end, remove) another run's bridge
            raise DockerdError(
                f"the bridge {BRIDGE} exists: another fault suite runs, or a killed one left it "
                f"(then: ip link del {BRIDGE})"
            )
        self._bridge = True
        for argv in (
            ["ip", "link", "add", BRIDGE, "type", "bridge"],
            ["ip", "addr", "add", BRIDGE_CIDR, "dev", BRIDGE],
            ["ip", "link", "set", BRIDGE, "up"],
        ):
            done = _run(argv)
            if done.returncode != 0:
                raise DockerdError(f"{' '.join(argv)}: {done.stderr.strip()}")
        config = {"runtimes": {"runsc": RUNSC}} if Path(RUNSC["path"]).exists() else {}
        (self.root / "daemon.json").write_text(json.dumps(config))
        self._spawn()

    def _spawn(self) -> None:
        argv = [
            "dockerd",
            "-H",
            self.host,
            "--data-root",
            str(self.root / "data"),
            "--exec-root",
            str(self.root / "exec"),
            "--pidfile",
            str(self.root / "dockerd.pid"),
            "--config-file",
            str(self.root / "daemon.json"),
            "--bridge",
            BRIDGE,
            "--iptables=false",
            "--ip6tables=false",
            "--ip-masq=false",
        ]
        self._log_file = (self.root / "dockerd.log").open("a")
        self._proc = subprocess.Popen(
            argv, stdout=self._log_file, stderr=subprocess.STDOUT, start_new_session=True
        )
        deadline = time.monotonic() + START_TIMEOUT_S
        while _run(["docker", "-H", self.host, "info"], timeout=10).returncode != 0:
            if self._proc.poll() is not None or time.monotonic() > deadline:
                raise DockerdError(
                    f"the private dockerd did not start (see {self.root}/dockerd.log)"
                )
            time.sleep(0.2)  # polling the engine's answer, with a deadline

    def load_runner(self) -> None:
        """Copy the runner image from the system engine (`docker save | docker load`)."""
        save = subprocess.Popen(
            ["docker", "save", RUNNER_IMAGE], stdout=subprocess.PIPE, env=_system_env()
        )
        load = subprocess.run(
            ["docker", "-H", self.host, "load", "-q"],
            stdin=save.stdout,
            capture_output=True,
            text=True,
            timeout=600,
            check=False,
        )
        save.wait(timeout=60)
        if save.returncode != 0 or load.returncode != 0:
            raise DockerdError(
                f"could not copy {RUNNER_IMAGE} from the system engine (run: make docker): "
                f"{load.stderr.strip()}"
            )

    def restart(self) -> None:
        """Stop dockerd (SIGTERM, as a service restart does) and start it again."""
        self._terminate()
        self._spawn()
        self.restarts += 1

    def _terminate(self) -> None:
        if self._proc is None:
            return
        if self._proc.poll() is None:
            self._proc.send_signal(signal.SIGTERM)
            try:
                self._proc.wait(timeout=STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                os.killpg(self._proc.pid, signal.SIGKILL)
                self._proc.wait(timeout=STOP_TIMEOUT_S)
        self._proc = None
        if self._log_file is not None:
            self._log_file.close()
            self._log_file = None

    def close(self) -> None:
        """Remove every container, stop dockerd, then its mounts, bridge and files."""
        if self._proc is not None and self._proc.poll() is None:
            ids = _run(["docker", "-H", self.host, "ps", "-aq"], timeout=30).stdout.split()
            if ids:
                _run(["docker", "-H", self.host, "rm", "-f", *ids], timeout=120)
        self._terminate()
        # Whatever dockerd left mounted under its roots (overlays, netns, shm), deepest first.
        with open("/proc/self/mounts") as mounts:
            points = [line.split()[1] for line in mounts]
        for point in sorted(points, key=len, reverse=True):
            if point.startswith(str(self.root)):
                _run(["umount", "-l", point])
        if self._bridge:
            _run(["ip", "link", "del", BRIDGE])
            self._bridge = False
        shutil.rmtree(self.root, ignore_errors=True)

    def containers(self, *filters: str) -> list[str]:
        """Ids of the containers on this engine (all states) matching ``--filter`` values."""
        argv = ["docker", "-H", self.host, "ps", "-aq", "--no-trunc"]
        for f in filters:
            argv += ["--filter", f]
        done = _run(argv, timeout=30)
        if done.returncode != 0:
            raise DockerdError(f"docker ps on the private engine: {done.stderr.strip()}")
        return done.stdout.split()

    def docker(self, *args: str, timeout: float = 60.0) -> subprocess.CompletedProcess:
        """One `docker` CLI call against this engine."""
        return _run(["docker", "-H", self.host, *args], timeout=timeout)

    def __enter__(self) -> PrivateEngine:
        try:
            self.start()
            self.load_runner()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _system_env() -> dict[str, str]:
    """The environment with the system engine's address (no DOCKER_HOST override)."""
    env = dict(os.environ)
    with contextlib.suppress(KeyError):
        del env["DOCKER_HOST"]
    return env
