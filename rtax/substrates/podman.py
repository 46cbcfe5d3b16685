"""The `podman` substrate: one container per rollout, through the podman command line.

Why these choices (docs/substrates/podman.md):

- The CLI, one ``podman`` process per call, as a harness that shells out to podman does: podman
  has no daemon, so each call is a process that opens the container store and, for exec, starts
  a conmon. That process start is part of what this kind measures (its tax), and the docs say so;
  a long-lived ``podman system service`` would be a different substrate (Docker's API on podman).
- Exec mode only: one ``podman exec`` per action, under the kit's in-container ``timeout``.
- Explicit ulimits: podman asks the runtime for RLIMIT_NOFILE 1048576 by default, which a host
  with a lower hard limit refuses ("error setting rlimits"); unset, containers get this
  process's own nofile limits (as Docker's get dockerd's) and nproc 4096 (`NPROC`).
- The runner image is built by Docker (``rtax image build``) and copied into podman's store by
  `prepare` (``docker save | podman load``, no registry), keeping its id, so both kinds run the
  very same image.
- No rate limit (a local store): nothing is retried.
- Nothing of this process's environment reaches a container: each gets the kit's allow-list
  (`kit.command_env`) with podman's default proxy passthrough off (``--http-proxy=false``), and
  the CLI processes themselves run with only what podman and docker need (`kit.tool_env`), so no
  credential is ever in a podman process's environment either (docs/configuration.md#secrets).
"""

from __future__ import annotations

import contextlib
import json
import os
import resource
import shutil
import socket
import subprocess
from collections.abc import Callable
from functools import cached_property
from typing import Any

from rtax.assets import toolchain
from rtax.assets.image import RUNNER_IMAGE
from rtax.core.failures import (
    CleanupFailed,
    CreateFailed,
    CreateTimeout,
    EnvironmentLost,
    ExecError,
    ReadyTimeout,
    SubstrateError,
)
from rtax.substrates import kit
from rtax.substrates.base import CommandResult, Environment, Leftover, clock

#: A state check is one ``podman inspect`` process (tens of ms by itself); the pause between
#: checks is short beside it, so the resolution stays near one check's cost.
POLL_INTERVAL_S = 0.01
#: Margin of a ``podman exec`` past the command's timeout (`kit.call_timeout`).
EXEC_MARGIN_S = 30.0
#: What podman exits with when *it* failed (not the command); its message starts "Error: ".
PODMAN_ERROR = 125
#: The default RLIMIT_NPROC of a container: podman runs conmon with a lower one than its own
#: caller (32768 where this shell has 96365), and runc can't raise it past conmon's.
NPROC = 4096
#: Any address outside this host: only the route to it is looked up, nothing is sent.
_OUTSIDE = ("203.0.113.1", 9)


class PodmanSubstrate:
    """Containers from `image`, one per rollout, made and run by the ``podman`` CLI."""

    kind = "podman"
    fidelity = "real"
    mode = "exec"

    def __init__(
        self,
        name: str = "podman",
        image: str = RUNNER_IMAGE,
        cpus: float | None = 1.0,
        memory: str | None = "1g",
        network: str = "podman",
        ulimits: str | None = None,
        podman: str = "podman",
        host_address: str | None = None,
        create_timeout_s: float = 120.0,
    ) -> None:
        binary = shutil.which(podman)
        if binary is None:
            raise SubstrateError(
                f"no {podman} here (Debian: apt-get install podman catatonit; "
                "make test installs it as root)"
            )
        self.name = name
        self.image = image
        self.cpus = cpus
        self.memory = memory
        self.network = network
        self.ulimits = ulimits
        self.podman = binary
        if host_address is not None:
            self.host_address = host_address  # configured: nothing is looked up
        self.create_timeout_s = create_timeout_s
        self._cli_env = kit.tool_env(os.environ)  # the image is loaded, never pulled: no proxy
        self._fingerprints: dict[str, dict[str, Any] | None] = {}

    @cached_property
    def host_address(self) -> str:
        """Where a container reaches this host: loopback on ``host``, else this host's address
        on its default route, which containers reach through the network's gateway.

        Not the gateway itself (10.88.0.1 on the default network): netavark makes that bridge
        only while a container is attached, and T2's git server must listen before the first
        container exists."""
        if self.network == "host":
            return "127.0.0.1"
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
            try:
                sock.connect(_OUTSIDE)  # a route lookup: UDP connect sends nothing
            except OSError as exc:
                raise SubstrateError(
                    f"no default route to find this host's address ({exc}); set host_address"
                ) from None
            return sock.getsockname()[0]

    # -- the CLI --------------------------------------------------------------------------------

    def _podman(
        self, *args: str, timeout_s: float = 60.0, error: type[SubstrateError] = SubstrateError
    ) -> str:
        """Run ``podman ARGS`` and return its stdout; its failure is `error` with its message."""
        try:
            done = subprocess.run(
                [self.podman, *args],
                env=self._cli_env,
                stdin=subprocess.DEVNULL,
                capture_output=True,
                text=True,
                timeout=max(timeout_s, 1.0),
                check=False,
            )
        except subprocess.TimeoutExpired as exc:
            raise error(f"podman {args[0]}: no answer within {timeout_s:g} s") from exc
        if done.returncode != 0:
            raise error(f"podman {args[0]}: {_message(done.stderr) or f'exit {done.returncode}'}")
        return done.stdout

    def _state(self, ref: str) -> str | None:
        """The container's state ("running", "exited", ...), None when there is no such one."""
        done = subprocess.run(
            [self.podman, "container", "inspect", "--format", "{{.State.Status}}", ref],
            env=self._cli_env,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        if done.returncode != 0:
            if "no such container" in done.stderr:
                return None
            raise SubstrateError(f"podman inspect: {_message(done.stderr)}")
        return done.stdout.strip()

    def _ulimits(self) -> list[str]:
        """``--ulimit`` flags: the configured ones, else nofile at this process's own limits
        (what Docker's containers get from dockerd here) and nproc at `NPROC`."""
        if self.ulimits:
            chosen = [u.strip() for u in self.ulimits.split(",") if u.strip()]
        else:
            soft, hard = (
                -1 if n == resource.RLIM_INFINITY else n
                for n in resource.getrlimit(resource.RLIMIT_NOFILE)
            )
            chosen = [f"nofile={soft}:{hard}", f"nproc={NPROC}:{NPROC}"]
        return [flag for u in chosen for flag in ("--ulimit", u)]

    # -- life of one environment ------------------------------------------------------------

    def create(self, run_id: str, *, lifetime_s: float | None = None) -> Environment:
        name = f"rtax-{run_id}"
        argv = ["create", "--name", name, "--init", "--network", self.network, "-w", "/work"]
        for key, value in kit.labels(run_id, self.name, lifetime_s).items():
            argv += ["--label", f"{key}={value}"]
        if self.cpus:
            argv += ["--cpus", f"{self.cpus:g}"]
        if self.memory:
            argv += ["--memory", self.memory]
        argv += [*self._ulimits(), *_env_flags(), self.image, "sleep", "infinity"]
        try:
            cid = self._podman(*argv, timeout_s=self.create_timeout_s, error=CreateFailed).strip()
        except CreateFailed as exc:
            self._remove_quietly(name)  # a create that timed out may still have made it
            if "no answer within" in str(exc):
                raise CreateTimeout(str(exc)) from exc
            raise
        except BaseException:  # Ctrl-C mid-create: nothing may outlive the rollout
            self._remove_quietly(name)
            raise
        env = Environment(env_id=cid, run_id=run_id, handle={"id": cid})
        env.mark("created")
        return env

    def wait_running(self, env: Environment, timeout_s: float) -> None:
        try:
            self._podman("start", env.env_id, timeout_s=timeout_s, error=CreateFailed)
        except CreateFailed as exc:  # refused (e.g. by the runtime) is not slow
            if "no answer within" in str(exc):
                raise ReadyTimeout(str(exc)) from exc
            raise
        env.mark("started")

        def running() -> bool | None:
            state = self._state(env.env_id)
            if state is None:
                raise EnvironmentLost(f"container {env.env_id[:12]} vanished at start")
            if state in ("exited", "stopped", "dead"):
                raise EnvironmentLost(f"container {env.env_id[:12]} {state} at start")
            return True if state == "running" else None

        kit.confirm_running(
            env,
            running,
            interval_s=POLL_INTERVAL_S,
            timeout_s=timeout_s,
            not_running=lambda: ReadyTimeout(f"container not running after {timeout_s:g} s"),
        )

    def run(self, env: Environment, command: str, timeout_s: float) -> CommandResult:
        argv = [
            self.podman,
            "exec",
            "-w",
            "/work",
            env.env_id,
            *kit.timeout_argv(command, timeout_s),
        ]
        t0 = clock()
        proc = subprocess.Popen(
            argv,
            env=self._cli_env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        try:
            out, err = kit.communicate(proc, kit.call_timeout(timeout_s, EXEC_MARGIN_S))
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.communicate()
            raise ExecError(
                f"podman exec: no answer {EXEC_MARGIN_S:g} s past the timeout"
            ) from None
        except BaseException:
            proc.kill()  # interrupted: the in-container `timeout` still ends the command
            proc.communicate()
            raise
        latency = clock() - t0
        code = proc.returncode
        stderr = err.decode("utf-8", "replace")
        if code == PODMAN_ERROR and _message(stderr).startswith("Error: "):
            # podman's own failure, or a command that exited 125 with such a line: the
            # container's state tells a lost environment apart; otherwise it is exec_error.
            if self._state(env.env_id) != "running":
                raise EnvironmentLost(f"container {env.env_id[:12]} is gone: {_message(stderr)}")
            raise ExecError(f"podman exec: {_message(stderr)}")
        kit.raise_if_timed_out(code, latency, timeout_s)
        return kit.first_command(
            env, CommandResult(code, out.decode("utf-8", "replace"), stderr, latency)
        )

    def destroy(self, env: Environment, timeout_s: float) -> None:
        if isinstance(env, Leftover) and env.frozen:  # a resume pool's whose owner is gone
            with contextlib.suppress(SubstrateError):
                self._podman("unpause", env.env_id, timeout_s=timeout_s)
        try:
            self._podman("rm", "--force", "--time", "0", env.env_id, timeout_s=timeout_s)
        except SubstrateError as exc:
            if "no such container" not in str(exc):
                raise CleanupFailed(f"remove {env.env_id[:12]}: {exc}") from exc
        deadline = clock() + timeout_s

        def gone() -> bool | None:
            try:
                return True if self._state(env.env_id) is None else None
            except (SubstrateError, subprocess.TimeoutExpired) as exc:
                raise CleanupFailed(f"verify removal of {env.env_id[:12]}: {exc}") from exc

        found = kit.poll(
            gone,
            interval_s=POLL_INTERVAL_S,
            deadline=deadline,
            timeout=lambda: CleanupFailed(
                f"container {env.env_id[:12]} still exists after removal"
            ),
        )
        env.resolved("cleanup", found.resolution_s)
        env.mark("removed")

    # -- pauses (rtax.substrates.base.Pauses, Weighs): the resume path --------------------------

    def pause(self, env: Environment) -> None:
        """Freeze every process of `env` (``podman pause``: the cgroup freezer)."""
        self._freezer(env, "pause")

    def unpause(self, env: Environment) -> None:
        """Thaw `env`: its processes run again where they stopped."""
        self._freezer(env, "unpause")

    def _freezer(self, env: Environment, what: str) -> None:
        try:
            self._podman(what, env.env_id, timeout_s=self.create_timeout_s, error=CreateFailed)
        except CreateFailed as exc:
            if "no such container" in str(exc):
                raise EnvironmentLost(f"container {env.env_id[:12]} is gone") from exc
            raise

    def memory_bytes(self, env: Environment) -> int | None:
        """`Weighs.memory_bytes`: the bytes ``podman stats`` reports (one sample, its raw
        figure rather than the rounded text it prints); None when it reports none."""
        out = self._podman(
            "stats", "--no-stream", "--format", "{{.ContainerStats.MemUsage}}", env.env_id
        ).strip()
        return int(out) if out.isdigit() else None

    def leftovers(self) -> list[Leftover]:
        wanted = kit.selector(self.name)
        argv = ["ps", "--all", "--format", "json"]
        for key, value in wanted.items():
            argv += ["--filter", f"label={key}={value}"]
        found = []
        for c in json.loads(self._podman(*argv) or "[]"):
            labels = c.get("Labels") or {}
            if all(labels.get(k) == v for k, v in wanted.items()):  # filters AND, checked anyway
                found.append(
                    kit.leftover(
                        c["Id"],
                        labels,
                        created_at=c.get("Created"),
                        detail=f"{self.name}, {c.get('State')}",
                        frozen=c.get("State") == "paused",
                    )
                )
        return found

    def _remove_quietly(self, ref: str) -> None:
        """Force-remove a container by id or name, ignoring every error (best effort)."""
        with contextlib.suppress(Exception):
            self._podman("rm", "--force", "--time", "0", ref)

    # -- around rollouts ----------------------------------------------------------------------

    def prepare(self, log: Callable[[str], None]) -> None:
        """The configured image in podman's store: the runner image is built by Docker when
        missing or stale and copied in when podman's copy has another id; another image must
        already be there."""
        if self.image == RUNNER_IMAGE:
            from rtax.assets.image import ensure_runner

            built = ensure_runner(log=log)
            if self._image_id() != built:
                log(f"copying {RUNNER_IMAGE} from Docker into podman's store...")
                self._copy_from_docker()
                if self._image_id() != built:
                    raise CreateFailed(f"{RUNNER_IMAGE} in podman is not Docker's {built[:19]}")
        elif self._image_id() is None:
            raise CreateFailed(f"image {self.image} is not in podman's store")
        self.toolchain_fingerprint()

    def _copy_from_docker(self) -> None:
        """``docker save IMAGE | podman load``: the same image, its id kept, no registry."""
        save = subprocess.Popen(
            ["docker", "save", RUNNER_IMAGE],
            env=self._cli_env,
            stdout=subprocess.PIPE,
            stdin=subprocess.DEVNULL,
        )
        try:
            load = subprocess.run(
                [self.podman, "load", "--quiet"],
                env=self._cli_env,
                stdin=save.stdout,
                capture_output=True,
                text=True,
                timeout=600,
                check=False,
            )
        finally:
            if save.stdout:
                save.stdout.close()
            save.wait(timeout=600)
        if save.returncode != 0 or load.returncode != 0:
            raise CreateFailed(f"docker save | podman load failed: {_message(load.stderr)}")

    def _image_id(self) -> str | None:
        """The image's id in podman's store ("sha256:..."), None when it is not there."""
        try:
            out = self._podman("image", "inspect", "--format", "{{.Id}}", self.image)
        except SubstrateError:
            return None
        return "sha256:" + out.strip().removeprefix("sha256:")

    def toolchain_fingerprint(self) -> dict[str, Any] | None:
        """What the image's ``python3`` reports (docs/toolchain.md), asked once per image id in
        a throw-away container, outside any timed phase; None if it can't say."""
        image_id = self._image_id()
        if image_id is None:
            return None
        if image_id not in self._fingerprints:
            try:
                out = self._podman(
                    "run", "--rm", "--network", "none", *self._ulimits(), *_env_flags(), image_id,
                    "python3", "-I", "-c", toolchain.FINGERPRINT_SCRIPT,
                    timeout_s=120,
                )  # fmt: skip
                self._fingerprints[image_id] = toolchain.parse_fingerprint(out)
            except (SubstrateError, ValueError):
                self._fingerprints[image_id] = None
        return self._fingerprints[image_id]

    def describe(self) -> dict[str, Any]:
        info = json.loads(self._podman("info", "--format", "json"))
        host = info.get("host") or {}
        runtime = host.get("ociRuntime") or {}
        return {
            "kind": self.kind,
            "endpoint": f"podman://{socket.gethostname()}",
            "podman_version": (info.get("version") or {}).get("Version"),
            "cli": "one podman process per call",
            "image": self.image,
            "image_id": self._image_id(),
            "toolchain": self.toolchain_fingerprint(),
            "runtime": {
                "name": runtime.get("name"),
                "path": runtime.get("path"),
                "version": next(iter((runtime.get("version") or "").splitlines()), None),
            },
            "network_backend": host.get("networkBackend"),
            "storage_driver": (info.get("store") or {}).get("graphDriverName"),
            "cgroups": host.get("cgroupVersion"),
            "cpus": self.cpus,
            "memory": self.memory,
            "network": self.network,
            "ulimits": self._ulimits()[1::2],
            "mode": self.mode,
        }

    def close(self) -> None:
        """Nothing to release: every call's process ends with it."""


def _message(stderr: str) -> str:
    """podman's error: the last non-empty line of its stderr ("Error: ...")."""
    lines = [line for line in stderr.strip().splitlines() if line.strip()]
    return lines[-1].strip() if lines else ""


def _env_flags() -> list[str]:
    """A container's environment: the kit's allow-list, and no proxy variables of the CLI's."""
    flags = ["--http-proxy=false"]
    for key, value in kit.COMMAND_ENV.items():
        flags += ["--env", f"{key}={value}"]
    return flags
