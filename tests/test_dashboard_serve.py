"""Where the dashboard listens (docs/dashboard.md#serving): `make run` and `make demo` start it
on 127.0.0.1 only, and only the configuration (or the environment) opens it."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from polling import DEADLINE_S, serving
from rtax.dashboard import serve
from rtax.settings import config

ROOT = Path(__file__).resolve().parent.parent


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _dashboard_command(target: str) -> str:
    """The foreground command of a Makefile target's recipe, as `make -n` prints it: what
    follows the trap that stops the scheduler."""
    venv = Path(sys.executable).parent.parent
    out = subprocess.run(
        ["make", "-n", "-s", "-C", str(ROOT), target, f"PY={sys.executable}", f"VENV={venv}"],
        capture_output=True,
        text=True,
        check=True,
        timeout=DEADLINE_S,
    ).stdout.replace("\\\n", " ")
    return out[out.rindex("TERM;") + len("TERM;") :].strip()


def _listening(port: int) -> set[str]:
    """The local addresses of the sockets listening on `port` (the kernel's table: what a
    peer on any interface could reach)."""
    found = set()
    for table, width in (("/proc/net/tcp", 8), ("/proc/net/tcp6", 32)):
        for line in Path(table).read_text().splitlines()[1:]:
            local, state = line.split()[1], line.split()[3]
            address, hex_port = local.split(":")
            if state == "0A" and int(hex_port, 16) == port:  # 0A: LISTEN
                raw = bytes.fromhex(address)
                # /proc prints each 32-bit word in host (little-endian) order
                raw = b"".join(raw[i : i + 4][::-1] for i in range(0, len(raw), 4))
                family = socket.AF_INET if width == 8 else socket.AF_INET6
                found.add(socket.inet_ntop(family, raw))
    return found


@pytest.mark.parametrize("target", ["run", "demo"])
def test_make_serves_the_dashboard_on_loopback_only(tmp_path: Path, target: str) -> None:
    port = _free_port()
    env = {
        **os.environ,
        "RTAX_DB": str(tmp_path / "rtax.db"),  # never the checkout's database
        "RTAX_DASHBOARD_PORT": str(port),
        "STREAMLIT_SERVER_PORT": str(port),  # the port, whoever decides the address
    }
    env.pop("RTAX_DASHBOARD_ADDRESS", None)
    proc = subprocess.Popen(
        ["bash", "-c", _dashboard_command(target)],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        start_new_session=True,  # its own group: stopped whole below
    )
    try:
        serving(f"http://127.0.0.1:{port}/_stcore/health", f"make {target}", proc, body=b"ok")
        assert _listening(port) == {"127.0.0.1"}
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:  # a grace before SIGKILL, not a wait on the test
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def test_only_the_configuration_or_the_environment_opens_it(tmp_path: Path) -> None:
    shipped = config.load(ROOT / "rtax.toml").dashboard
    assert serve.resolve(shipped, environ={}) == serve.Dashboard("127.0.0.1", 8501)
    argv = serve.command(serve.resolve(shipped, environ={}))
    assert argv[argv.index("--server.address") + 1] == "127.0.0.1"

    raw = {"dashboard": {"address": "0.0.0.0", "port": 8600}}
    opened = config.parse(raw, base=tmp_path).dashboard
    assert serve.resolve(opened, environ={}) == serve.Dashboard("0.0.0.0", 8600)
    assert serve.resolve(opened, environ={}).health_url == "http://127.0.0.1:8600/_stcore/health"
    image = {serve.ADDRESS_ENV: "0.0.0.0", serve.PORT_ENV: "8700"}  # the app image's way
    assert serve.resolve(shipped, environ=image) == serve.Dashboard("0.0.0.0", 8700)
    assert serve.resolve(opened, "127.0.0.1", 9000, environ=image).address == "127.0.0.1"
    with pytest.raises(ValueError, match="port number"):
        serve.resolve(shipped, environ={serve.PORT_ENV: "http"})


def test_a_bad_dashboard_table_is_one_line_per_mistake(tmp_path: Path) -> None:
    raw = {"dashboard": {"address": "", "port": 70000, "auth": "none"}}
    with pytest.raises(config.ConfigError) as caught:
        config.parse(raw, base=tmp_path)
    problems = sorted(caught.value.problems)
    assert [p.split(":")[0] for p in problems] == [
        "dashboard.address",
        "dashboard.auth",
        "dashboard.port",
    ]
