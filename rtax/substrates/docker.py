"""The `docker` substrate: one container per rollout, through the Docker Engine API.

Why these choices (README.md#docker):

- The low-level `docker.APIClient` is used, one HTTP call per step, so that a phase is the engine's
  time and not the SDK's extra inspections: create = ``POST /containers/create``; orchestration =
  ``POST /containers/{id}/start`` until an inspect reports it running; ready = the first ``true``.
- Two action modes, both labelled in the data (`runs.mode`):
  ``exec``: one Docker exec per action (create, start, inspect: what most harnesses do);
  ``session``: the paper's low-latency action API: one persistent shell per container, fed framed
  commands over the attached exec stream (`rtax.substrates.docker_session`).
- A command's timeout is enforced inside the container by coreutils ``timeout`` (TERM to the whole
  process group, KILL a second later), so a hung action stops where it runs.
- Containers carry the ``rtax`` label, their run id, creation time and owner (host:pid), so that
  `rtax reap` can tell an orphan from a container that a live run still owns.
- gVisor is the same kind with ``runtime="runsc"`` (the built-in ``docker-gvisor`` name).
"""

from __future__ import annotations

import contextlib
import ipaddress
import os
import re
import shutil
import socket
import subprocess
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from functools import cached_property
from importlib import metadata
from typing import Any

from rtax import toolchain
from rtax.image import RUNNER_IMAGE
from rtax.substrates.base import (
    LABEL,
    CleanupFailed,
    CommandResult,
    CommandTimeout,
    CreateFailed,
    CreateTimeout,
    Environment,
    EnvironmentLost,
    ExecError,
    Leftover,
    RateLimited,
    ReadyTimeout,
    clock,
)
from rtax.substrates.poll import poll

MODES = ("exec", "session")
#: Exit status of coreutils `timeout` when it had to stop the command.
_TIMEOUT_EXIT = 124
_KILL_GRACE_S = 1.0
#: The engine is a local socket with no rate limit and an inspect costs about a millisecond of
#: its time, so state is polled every 10 ms: a resolution well under 5 % of a container start
#: (README.md#resolution). Both polls usually succeed at once (start and forced removal mostly
#: finish before they answer), and then the resolution is 0.
POLL_INTERVAL_S = 0.01


def _docker() -> Any:
    import docker  # imported on first use: the registry stays cheap for other substrates

    return docker


class DockerSubstrate:
    """Containers from `image`, one per rollout, with CPU/memory limits, network and runtime."""

    kind = "docker"
    fidelity = "real"

    def __init__(
        self,
        name: str = "docker",
        image: str = RUNNER_IMAGE,
        runtime: str | None = None,
        cpus: float | None = 1.0,
        memory: str | None = "1g",
        network: str = "bridge",
        mode: str = "exec",
        base_url: str | None = None,
        host_address: str | None = None,
        api_timeout_s: float = 3600.0,
        create_timeout_s: float = 120.0,
    ) -> None:
        if mode not in MODES:
            raise ValueError(f"mode must be one of {', '.join(MODES)}, got {mode!r}")
        self.name = name
        self.image = image
        self.runtime = runtime
        self.cpus = cpus
        self.memory = memory
        self.network = network
        self.mode = mode
        self.base_url = base_url
        if host_address is not None:
            self.host_address = host_address  # configured: the gateway is not asked
        docker = _docker()
        kwargs: dict[str, Any] = {"timeout": api_timeout_s, "version": "auto"}
        if base_url:
            kwargs["base_url"] = base_url
            self.api = docker.APIClient(**kwargs)
        else:
            self.api = docker.from_env(timeout=api_timeout_s).api
        self._owner = f"{socket.gethostname()}:{os.getpid()}"
        self.create_timeout_s = create_timeout_s
        self._engine_info: dict[str, Any] | None = None
        self._runtime_provenance: dict[str, Any] | None = None

    @cached_property
    def host_address(self) -> str:
        """Where a container reaches this host: the network's gateway (or loopback on host),
        asked once.

        The default bridge often lists no gateway in its IPAM config; then the bridge
        interface's own address is the gateway, and failing that Docker's convention, the
        subnet's first host address.
        """
        if self.network == "host":
            return "127.0.0.1"
        info = self.api.inspect_network(self.network)
        configs = (info.get("IPAM") or {}).get("Config") or []
        for config in configs:
            if config.get("Gateway"):
                return config["Gateway"].split("/")[0]
        bridge = (info.get("Options") or {}).get("com.docker.network.bridge.name")
        if bridge and (address := _interface_ipv4(bridge)):
            return address
        for config in configs:
            if config.get("Subnet") and ":" not in config["Subnet"]:
                return str(next(ipaddress.ip_network(config["Subnet"]).hosts()))
        raise ExecError(f"network {self.network} has no gateway address")

    # -- life of one environment ------------------------------------------------------------

    def create(self, run_id: str) -> Environment:
        errors = _docker().errors
        host_config = self.api.create_host_config(
            nano_cpus=int(self.cpus * 1e9) if self.cpus else None,
            mem_limit=self.memory,
            network_mode=self.network,
            init=True,  # PID 1 reaps what timed-out commands leave behind
            runtime=self.runtime,  # (create_container's own `runtime` is not sent by the SDK)
        )
        labels = {
            LABEL: "1",
            f"{LABEL}.run_id": run_id,
            f"{LABEL}.created_at": datetime.now(UTC).isoformat(),
            f"{LABEL}.owner": self._owner,
            f"{LABEL}.substrate": self.name,
        }
        name = f"rtax-{run_id}"
        try:
            with self._call_timeout(self.create_timeout_s):
                created = self.api.create_container(
                    self.image,
                    command=["sleep", "infinity"],
                    labels=labels,
                    host_config=host_config,
                    working_dir="/work",
                    name=name,
                )
        except errors.ImageNotFound as exc:
            raise CreateFailed(f"image {self.image} not found (run: rtax image build)") from exc
        except errors.APIError as exc:
            raise _classify(exc, CreateFailed) from exc
        except BaseException as exc:
            # The engine may have made the container before the answer was lost (a transport
            # timeout, Ctrl-C): remove it by its name, so that nothing outlives the rollout.
            self._remove_quietly(name)
            if isinstance(exc, _transport_errors()):
                raise CreateTimeout(f"container create: {exc}") from exc
            raise
        env = Environment(env_id=created["Id"], run_id=run_id, handle={"id": created["Id"]})
        env.mark("created")
        return env

    def wait_running(self, env: Environment, timeout_s: float) -> None:
        errors = _docker().errors
        cid = env.env_id
        try:
            with self._call_timeout(timeout_s):
                self.api.start(cid)
            env.mark("started")

            def running() -> bool | None:
                state = self.api.inspect_container(cid)["State"]
                if state.get("Status") in ("exited", "dead"):
                    raise EnvironmentLost(f"container exited at start: {state.get('Error')}")
                return True if state.get("Running") else None

            found = poll(
                running,
                interval_s=POLL_INTERVAL_S,
                deadline=clock() + timeout_s,
                timeout=lambda: ReadyTimeout(f"container not running after {timeout_s:g} s"),
            )
            env.resolved("orchestration", found.resolution_s)
            env.mark("running")
        except errors.NotFound as exc:
            raise EnvironmentLost(f"container {cid[:12]} vanished at start") from exc
        except errors.APIError as exc:
            raise _classify(exc, CreateFailed) from exc
        except _transport_errors() as exc:
            raise ReadyTimeout(f"container start: {exc}") from exc

    def run(self, env: Environment, command: str, timeout_s: float) -> CommandResult:
        if self.mode == "session":
            result = self._session(env).run(command, timeout_s)
        else:
            result = self._exec(env, command, timeout_s)
        if result.exit_code == 0 and not env.handle.get("first_command"):
            env.handle["first_command"] = True
            env.mark("first_command")
        return result

    def _exec(self, env: Environment, command: str, timeout_s: float) -> CommandResult:
        errors = _docker().errors
        t0 = clock()
        wrapped = [
            "timeout",
            "-k",
            f"{_KILL_GRACE_S:g}",
            f"{max(timeout_s, 0.001):.3f}",
            "/bin/sh",
            "-c",
            command,
        ]
        try:
            # The in-container `timeout` stops the command; the API timeout is the backstop
            # for an engine that stops answering.
            with self._call_timeout(timeout_s + _KILL_GRACE_S + 30):
                exec_id = self.api.exec_create(env.env_id, wrapped, workdir="/work")["Id"]
                out, err = self.api.exec_start(exec_id, demux=True)
                code = self.api.exec_inspect(exec_id)["ExitCode"]
        except errors.NotFound as exc:
            raise EnvironmentLost(f"container {env.env_id[:12]} is gone") from exc
        except errors.APIError as exc:
            if exc.status_code == 409:  # "container ... is not running"
                raise EnvironmentLost(str(exc.explanation)) from exc
            raise _classify(exc, ExecError) from exc
        except _transport_errors() as exc:
            raise ExecError(f"exec: {exc}") from exc
        latency = clock() - t0
        # 124 (TERM) or 137 (KILL after the grace) from `timeout`, but only once the timeout
        # has passed: a command may exit 124 by itself (e.g. an agent's own `timeout 10 ...`).
        if code in (_TIMEOUT_EXIT, 137) and latency >= timeout_s:
            raise CommandTimeout(f"killed after {timeout_s:.3g} s (exit {code})")
        if code is None:
            raise ExecError("exec finished without an exit code")
        return CommandResult(
            code,
            (out or b"").decode("utf-8", "replace"),
            (err or b"").decode("utf-8", "replace"),
            latency,
        )

    def _session(self, env: Environment) -> Any:
        from rtax.substrates.docker_session import ShellSession

        session = env.handle.get("session")
        if session is None or session.closed:
            session = ShellSession.open(self.api, env.env_id)
            env.handle["session"] = session
            env.mark("session_opened")
        return session

    def destroy(self, env: Environment, timeout_s: float) -> None:
        errors = _docker().errors
        session = env.handle.get("session") if isinstance(env.handle, dict) else None
        if session is not None:
            session.close()
        try:
            with self._call_timeout(timeout_s):
                self.api.remove_container(env.env_id, force=True)
        except errors.NotFound:
            pass  # already gone: verified below
        except errors.APIError as exc:
            raise CleanupFailed(f"remove {env.env_id[:12]}: {exc.explanation}") from exc
        except _transport_errors() as exc:
            raise CleanupFailed(f"remove {env.env_id[:12]}: {exc}") from exc
        deadline = clock() + timeout_s

        def gone() -> bool | None:
            # removal is asynchronous for a dying container: poll, bounded by the deadline
            try:
                with self._call_timeout(max(deadline - clock(), 1.0)):
                    self.api.inspect_container(env.env_id)
            except errors.NotFound:
                return True
            except (errors.APIError, *_transport_errors()) as exc:
                raise CleanupFailed(f"verify removal of {env.env_id[:12]}: {exc}") from exc
            return None

        found = poll(
            gone,
            interval_s=POLL_INTERVAL_S,
            deadline=deadline,
            timeout=lambda: CleanupFailed(
                f"container {env.env_id[:12]} still exists after removal"
            ),
        )
        env.resolved("cleanup", found.resolution_s)
        env.mark("removed")

    def leftovers(self) -> list[Leftover]:
        found = []
        # Only this substrate's own (docker and docker-gvisor share an engine).
        label_filter = [LABEL, f"{LABEL}.substrate={self.name}"]
        for c in self.api.containers(all=True, filters={"label": label_filter}):
            labels = c.get("Labels") or {}
            created = labels.get(f"{LABEL}.created_at")
            if created is None and c.get("Created"):
                created = datetime.fromtimestamp(c["Created"], UTC).isoformat()
            found.append(
                Leftover(
                    env_id=c["Id"],
                    run_id=labels.get(f"{LABEL}.run_id"),
                    created_at=created,
                    owner=labels.get(f"{LABEL}.owner"),
                    detail=f"{labels.get(f'{LABEL}.substrate')}, {c.get('State')}",
                )
            )
        return found

    def _remove_quietly(self, ref: str) -> None:
        """Force-remove a container by id or name, ignoring every error (best effort)."""
        with contextlib.suppress(Exception), self._call_timeout(60):
            self.api.remove_container(ref, force=True)

    @contextlib.contextmanager
    def _call_timeout(self, seconds: float) -> Iterator[None]:
        """Bound the engine calls inside to `seconds` (the SDK's client-wide timeout)."""
        previous = self.api.timeout
        self.api.timeout = max(seconds, 1.0)
        try:
            yield
        finally:
            self.api.timeout = previous

    def prepare(self, log: Callable[[str], None]) -> None:
        """Build the runner image when it is the one configured and it is missing or stale."""
        if self.image == RUNNER_IMAGE:
            from rtax.image import ensure_runner

            ensure_runner(log=log)
            self.toolchain_fingerprint()
        else:
            try:
                self.api.inspect_image(self.image)
            except _docker().errors.ImageNotFound:
                raise CreateFailed(f"image {self.image} is not on this engine") from None

    def close(self) -> None:
        """Close the engine client's connection pool."""
        self.api.close()

    def _info(self) -> dict[str, Any]:
        """The engine's `docker info`, asked once per substrate (it names runtimes and defaults,
        which don't change under a running probe without a daemon reload)."""
        if self._engine_info is None:
            self._engine_info = dict(self.api.info())
        return self._engine_info

    def _default_runtime(self) -> str:
        """The engine's default runtime (what a container without `runtime` really runs on)."""
        return str(self._info().get("DefaultRuntime") or "runc")

    def runtime_provenance(self) -> dict[str, Any]:
        """The runtime in use as the engine runs it: path and flags, and for runsc its version,
        platform and network mode (cached: it costs a `docker info` and two runsc calls)."""
        if self._runtime_provenance is None:
            # The runtime's binary can only be asked where the engine runs: a local socket.
            local = self.api.base_url == "http+docker://localhost"
            self._runtime_provenance = runtime_provenance(
                self._info(), self.runtime, _run_binary if local else None
            )
        return self._runtime_provenance

    def describe(self) -> dict[str, Any]:
        version = self.api.version()
        try:
            image = self.api.inspect_image(self.image)
            image_id, digests = image["Id"], image.get("RepoDigests") or []
        except _docker().errors.ImageNotFound:
            image_id, digests = None, []
        return {
            "kind": self.kind,
            "endpoint": self.api.base_url,
            "engine_version": version.get("Version"),
            "api_version": version.get("ApiVersion"),
            "image": self.image,
            "image_id": image_id,
            "image_digests": digests,
            "toolchain": self.toolchain_fingerprint(image_id),
            "runtime": self.runtime or self._default_runtime(),
            "runtime_config": self.runtime_provenance(),
            "cpus": self.cpus,
            "memory": self.memory,
            "network": self.network,
            "mode": self.mode,
            "client": {"docker": metadata.version("docker")},
        }

    def toolchain_fingerprint(self, image_id: str | None = None) -> dict[str, Any] | None:
        """The image's workload toolchain, as its ``python3`` reports it (README.md#the-workload-
        toolchain). Asked once per engine and image id, in a throw-away container, outside any
        timed phase (provenance is taken before a rollout's clock starts)."""
        if image_id is None:
            try:
                image_id = self.api.inspect_image(self.image)["Id"]
            except _docker().errors.ImageNotFound:
                return None
        key = (self.api.base_url, image_id)
        if key not in _TOOLCHAINS:
            _TOOLCHAINS[key] = _image_toolchain(self.api, image_id)
        return _TOOLCHAINS[key]


#: (engine, image id) -> toolchain fingerprint; an image's contents never change under its id.
_TOOLCHAINS: dict[tuple[str, str], dict[str, Any] | None] = {}


def _image_toolchain(api: Any, image_id: str) -> dict[str, Any] | None:
    """Run the fingerprint script in a container of `image_id`; None if it can't say."""
    container = api.create_container(
        image_id, command=["python3", "-I", "-c", toolchain.FINGERPRINT_SCRIPT]
    )["Id"]
    try:
        api.start(container)
        status = api.wait(container, timeout=120).get("StatusCode")
        out = api.logs(container, stdout=True, stderr=False).decode("utf-8", "replace")
        if status != 0 or not out.strip():
            return None
        return toolchain.parse_fingerprint(out)
    except Exception:  # an image without python3 has no toolchain to report
        return None
    finally:
        with contextlib.suppress(Exception):
            api.remove_container(container, force=True)


def runtime_provenance(
    info: dict[str, Any],
    runtime: str | None,
    run: Callable[[list[str]], str | None] | None,
) -> dict[str, Any]:
    """What runs a container of `runtime` (None: the engine's default), from `docker info`.

    ``path`` and ``args`` are the engine's registration (daemon.json). For runsc, also its
    ``version`` (``runsc --version``) and the ``platform`` and ``network`` it runs with: the flag
    when the registration sets one, else the binary's own default (``runsc flags``), because a
    gVisor figure depends on both. `run` runs a command and returns its stdout (None: it can't
    be run here, e.g. a remote engine); what can't be known is None, never guessed.
    """
    name = runtime or str(info.get("DefaultRuntime") or "runc")
    entry = (info.get("Runtimes") or {}).get(name) or {}
    path = entry.get("path")
    args = [str(a) for a in entry.get("runtimeArgs") or []]
    described: dict[str, Any] = {"name": name, "path": path, "args": args}
    if not path or "runsc" not in os.path.basename(path):
        return described
    version = flags = None
    if run is not None:
        if out := run([path, "--version"]):
            first = out.splitlines()[0]
            version = first.removeprefix("runsc version ").strip() or None
        flags = run([path, "flags"])
    for flag in ("platform", "network"):
        described[flag] = _flag_value(args, flag) or _flag_default(flags, flag)
    described["version"] = version
    return described


def _flag_value(args: list[str], flag: str) -> str | None:
    """The value of ``--flag=v`` / ``-flag=v`` / ``--flag v`` in `args` (the last one wins)."""
    value = None
    for i, arg in enumerate(args):
        key, eq, rest = arg.lstrip("-").partition("=")
        if key != flag or not arg.startswith("-"):
            continue
        if eq:
            value = rest
        elif i + 1 < len(args):
            value = args[i + 1]
    return value


def _flag_default(flags: str | None, flag: str) -> str | None:
    """A flag's default from ``runsc flags`` output (Go's flag help: ``(default "systrap")`` on
    the lines after ``-platform string``)."""
    if not flags:
        return None
    lines = flags.splitlines()
    for i, line in enumerate(lines):
        if line.strip().split(" ")[0] != f"-{flag}":
            continue
        for text in lines[i + 1 :]:
            if text.strip().startswith("-"):
                break
            # `(default "systrap")` for a string flag, `sandbox (default), host` for a value
            found = re.search(r'\(default "([^"]+)"\)', text) or re.search(
                r"(\w+) \(default\)", text
            )
            if found is not None:
                return found.group(1)
        return None
    return None


def _run_binary(argv: list[str]) -> str | None:
    """Output of a short local command (stdout, then stderr: ``runsc flags`` writes there), or
    None if it can't run (missing, failing, hanging)."""
    if shutil.which(argv[0]) is None:
        return None
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=10, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return done.stdout + done.stderr if done.returncode == 0 else None


def _interface_ipv4(name: str) -> str | None:
    """The IPv4 address of a network interface (SIOCGIFADDR), or None."""
    import fcntl
    import struct

    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        try:
            packed = fcntl.ioctl(sock.fileno(), 0x8915, struct.pack("256s", name.encode()[:15]))
        except OSError:
            return None
    return socket.inet_ntoa(packed[20:24])


def _transport_errors() -> tuple[type[BaseException], ...]:
    import requests

    return (requests.exceptions.ConnectionError, requests.exceptions.Timeout)


def _classify(exc: Any, default: type[Exception]) -> Exception:
    """Map an engine error to an rtax error class (429 -> rate_limited, else `default`)."""
    status = getattr(exc, "status_code", None)
    message = str(getattr(exc, "explanation", None) or exc)
    if status == 429 or "toomanyrequests" in message.lower():
        return RateLimited(message)
    return default(f"{status}: {message}")
