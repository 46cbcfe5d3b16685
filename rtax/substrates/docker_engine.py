"""What the docker substrate asks the engine and its host outside any timed phase.

Why apart from `rtax.substrates.docker`: none of this is a rollout's work. A Docker figure
depends on the runtime as the engine really runs it (runc, or runsc with a platform and a
network mode) and on the image's workload toolchain, so both go into provenance
(docs/substrates/docker.md); and T2 needs the address at which a container reaches this host.
Each is asked once and cached, never inside a phase.
"""

from __future__ import annotations

import contextlib
import ipaddress
import os
import re
import shutil
import socket
import subprocess
from collections.abc import Callable
from typing import Any

from rtax import toolchain
from rtax.substrates.base import SubstrateError

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
