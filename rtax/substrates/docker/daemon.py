"""The docker substrate's engine client, and what it asks the engine and its host outside any
timed phase.

Why a client of our own (`engine_client`): the SDK bounds a call by its client-wide ``timeout``
attribute, and one substrate's client is shared by every thread that probes through it (the
emulations run up to 32 environments through one). Setting that attribute per call lets one
thread's short bound cut another's long call, or the reverse. Here a call's bound is a
`contextvars.ContextVar` read when the request is sent (`call_timeout`), so it belongs to the
thread that set it and no client state changes per call.

Why the rest is apart from `rtax.substrates.docker.substrate`: none of it is a rollout's work. A
Docker figure depends on the runtime as the engine really runs it (runc, or runsc with a platform
and a network mode) and on the image's workload toolchain, so both go into provenance
(docs/substrates/docker.md); and T2 needs the address at which a container reaches this host.
Each is asked once and cached, never inside a phase.
"""

from __future__ import annotations

import contextlib
import functools
import ipaddress
import os
import re
import shutil
import socket
import subprocess
from collections.abc import Callable, Iterator
from contextvars import ContextVar
from typing import Any

from rtax.assets import toolchain
from rtax.core.failures import SubstrateError

#: The bound of the engine calls made in this context (None: the client's own default).
_CALL_TIMEOUT: ContextVar[float | None] = ContextVar("rtax_docker_call_timeout", default=None)


@contextlib.contextmanager
def call_timeout(seconds: float) -> Iterator[None]:
    """Bound the engine calls this thread makes inside to `seconds` (at least 1 s); other
    threads sharing the client keep their own bounds."""
    token = _CALL_TIMEOUT.set(max(seconds, 1.0))
    try:
        yield
    finally:
        _CALL_TIMEOUT.reset(token)


@functools.cache
def _client_class() -> type:
    import docker  # imported on first use, like the substrate's own

    class EngineClient(docker.APIClient):  # type: ignore[misc]
        """`docker.APIClient` whose ``timeout`` is the calling context's `call_timeout` (else
        the one it was made with): every SDK path reads it at send time (`_set_request_timeout`,
        and stop/restart's connection bound), so nothing is set on the shared client per call."""

        @property
        def timeout(self) -> float | None:
            bound = _CALL_TIMEOUT.get()
            return self._default_timeout if bound is None else bound

        @timeout.setter
        def timeout(self, value: float | None) -> None:
            self._default_timeout = value

    return EngineClient


def engine_client(base_url: str | None, timeout_s: float) -> Any:
    """A client of the engine at `base_url` (None: Docker's environment, as ``docker.from_env``),
    its calls bounded by `timeout_s` unless a `call_timeout` says otherwise."""
    import docker

    kwargs: dict[str, Any] = {"timeout": timeout_s, "version": "auto"}
    if base_url:
        kwargs["base_url"] = base_url
    else:
        kwargs.update(docker.utils.kwargs_from_env())
    return _client_class()(**kwargs)


#: (engine, image id) -> toolchain fingerprint; an image's contents never change under its id.
_TOOLCHAINS: dict[tuple[str, str], dict[str, Any] | None] = {}


def image_toolchain(api: Any, image_id: str) -> dict[str, Any] | None:
    """The image's workload toolchain as its ``python3`` reports it (docs/toolchain.md),
    asked once per engine and image id in a throw-away container; None if it
    can't say (an image without python3)."""
    key = (api.base_url, image_id)
    if key not in _TOOLCHAINS:
        _TOOLCHAINS[key] = _ask_toolchain(api, image_id)
    return _TOOLCHAINS[key]


def _ask_toolchain(api: Any, image_id: str) -> dict[str, Any] | None:
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


def gateway_address(api: Any, network: str) -> str:
    """Where a container on `network` reaches this host: the network's gateway (loopback on
    ``host``). The default bridge often lists no gateway in its IPAM config; then the bridge
    interface's own address is the gateway, and failing that Docker's convention, the subnet's
    first host address."""
    if network == "host":
        return "127.0.0.1"
    info = api.inspect_network(network)
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
    raise SubstrateError(f"network {network} has no gateway address")


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


def run_binary(argv: list[str]) -> str | None:
    """Output of a short local command (stdout, then stderr: ``runsc flags`` writes there), or
    None if it can't run (missing, failing, hanging)."""
    if shutil.which(argv[0]) is None:
        return None
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=10, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return done.stdout + done.stderr if done.returncode == 0 else None
