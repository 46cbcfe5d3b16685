"""The real browser and the real dashboard server for the browser tests: Debian's Chromium
through Playwright, and `rtax dashboard` (the launcher `make run` uses) on a free port
(tests/test_browser.py, tests/test_live_monitor.py, tests/test_load_bursts.py).

Chromium runs in a network namespace of its own and reaches the dashboard over a veth pair
(docs/dashboard.md#the-browser-tests): Chromium aborts every request in flight
(net::ERR_NETWORK_CHANGED) whenever the host's interfaces change, and Docker adds and removes one
for every container it starts or stops, the suite's own included. Where no namespace can be
made (not root, no iproute2), Chromium shares the host's network and the suite says so once;
under CI=true that is a failure.

Every browser wait has the suite's one deadline (tests/polling.py): a page from `new_page` has it
as its default timeout for navigation, locators, load states and downloads, and `chromium` sets
it for `expect(...)` assertions, so a test names no timeout of its own (Playwright's 30 s and
5 s defaults are what failed on a busy machine)."""

from __future__ import annotations

import atexit
import fcntl
import functools
import ipaddress
import json
import os
import shutil
import socket
import subprocess
import sys
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from polling import DEADLINE_MS, DEADLINE_S, serving
from rtax.substrates.reaper import pid_alive

ROOT = Path(__file__).resolve().parent.parent
#: Where a failed page's screenshot goes (and the tests' own screenshots).
ARTIFACTS = Path(os.environ.get("RTAX_ARTIFACTS", ROOT / "test-artifacts")) / "screenshots"
CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
LAUNCH_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--no-first-run",
    "--disable-dev-shm-usage",
]


#: The wrapper Playwright launches instead of Chromium: `ip netns exec` into the namespace.
IN_NETNS = ROOT / "tests" / "chromium-in-netns.sh"
#: The namespaces' names: this prefix and the pid of the test session that made it.
NETNS_PREFIX = "rtax-browser-"
#: Where each session's veth pair takes a /30: link-local, which neither Docker's address pools
#: nor a LAN's DHCP hand out, and away from the clouds' metadata addresses (169.254.169.x).
NETNS_POOL = ipaddress.ip_network("169.254.213.0/24")
#: Held while a session picks its /30 and takes it, so two sessions never pick the same one.
_NETNS_LOCK = Path("/run/rtax-browser-netns.lock")
LOOPBACK = "127.0.0.1"


def need(condition: bool, reason: str) -> None:
    """Skip without `condition`, but fail under CI, which must run every browser test."""
    if condition:
        return
    if os.environ.get("CI") == "true":
        pytest.fail(f"CI requires the browser test: {reason}")
    pytest.skip(f"{reason}; `make test` as root installs it")


class NoNetns(Exception):
    """Why this session's network namespace could not be made."""


@dataclass(frozen=True)
class Netns:
    """The browser's network namespace: `name` for `ip netns`, and the two ends of its veth
    pair's /30: `host` in the root namespace (where the dashboard listens, reachable from the
    test process too) and `guest` inside, beside the namespace's own loopback."""

    name: str
    host: str
    guest: str


def _ip(*args: str, check: bool = True) -> str:
    """`ip ARGS`' output; NoNetns with its error when it fails (and `check`)."""
    try:
        done = subprocess.run(
            ["ip", *args], capture_output=True, text=True, timeout=DEADLINE_S, check=False
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise NoNetns(f"`ip {' '.join(args)}`: {exc}") from None
    if check and done.returncode != 0:
        raise NoNetns(f"`ip {' '.join(args)}` failed: {done.stderr.strip()}")
    return done.stdout


def _remove_stale() -> None:
    """Remove the namespaces of sessions that died without removing theirs (killed, crashed):
    their pid is gone and nothing runs inside. A namespace's veth end goes with it, and takes
    its peer in the root namespace along."""
    for line in _ip("netns", "list").splitlines():
        name = line.split(" ", 1)[0]
        pid = name.removeprefix(NETNS_PREFIX)
        if name == pid or not pid.isdigit() or pid_alive(int(pid)):
            continue
        if not _ip("netns", "pids", name, check=False).split():
            _remove_netns(name, int(pid))


def _taken(net: ipaddress.IPv4Network) -> bool:
    """Whether an address of this host is in `net`, or a route of any table is for `net` or a
    part of it (a wider route, such as a zeroconf 169.254.0.0/16, loses to the /30's own)."""
    for link in json.loads(_ip("-j", "-4", "addr", "show") or "[]"):
        for a in link.get("addr_info", []):
            if ipaddress.ip_address(a["local"]) in net:
                return True
    for route in json.loads(_ip("-j", "-4", "route", "show", "table", "all") or "[]"):
        dst = route.get("dst", "default")
        if dst != "default" and ipaddress.ip_network(dst, strict=False).subnet_of(net):
            return True
    return False


def _make_netns() -> Netns:
    if os.geteuid() != 0:
        raise NoNetns("`ip netns` needs root")
    if shutil.which("ip") is None:
        raise NoNetns("no `ip` (Debian's iproute2)")
    pid = os.getpid()
    name, (outer, inner) = f"{NETNS_PREFIX}{pid}", _veth(pid)
    _remove_stale()
    try:
        lock = _NETNS_LOCK.open("a")
    except OSError as exc:
        raise NoNetns(f"{_NETNS_LOCK}: {exc}") from None
    with lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
        net = next((n for n in NETNS_POOL.subnets(new_prefix=30) if not _taken(n)), None)
        if net is None:
            raise NoNetns(f"every /30 of {NETNS_POOL} is taken")
        host, guest = (str(a) for a in net.hosts())
        _ip("netns", "add", name)
        try:
            _ip("link", "add", outer, "type", "veth", "peer", "name", inner, "netns", name)
            # no IPv6 link-local address, whose duplicate detection ending later would be a
            # change of the namespace's network while Chromium runs in it
            _ip("link", "set", "dev", outer, "addrgenmode", "none")
            _ip("-n", name, "link", "set", "dev", inner, "addrgenmode", "none")
            _ip("addr", "add", f"{host}/30", "dev", outer)
            _ip("link", "set", "dev", outer, "up")
            _ip("-n", name, "addr", "add", f"{guest}/30", "dev", inner)
            _ip("-n", name, "link", "set", "dev", "lo", "up")
            _ip("-n", name, "link", "set", "dev", inner, "up")
            _ip("netns", "exec", name, "true")  # what the wrapper does (setns, mounting /sys)
        except BaseException:
            _remove_netns(name, pid)
            raise
    return Netns(name, host, guest)


def _veth(pid: int) -> tuple[str, str]:
    """The veth pair's names, root end first (an interface's name has at most 15 characters)."""
    return f"rtaxbr{pid}", f"rtaxbn{pid}"


def _remove_netns(name: str, pid: int) -> None:
    """Remove the veth pair (at once: the kernel would remove it with the namespace, but a
    moment later, and the next session should find its /30 free) and the namespace."""
    _ip("link", "del", "dev", _veth(pid)[0], check=False)
    _ip("netns", "del", name, check=False)


@functools.cache
def browser_netns() -> Netns | None:
    """This session's network namespace for Chromium, made on first use and removed when the
    session ends; None where it cannot be made (Chromium then shares the host's network),
    said once. Under CI=true a namespace that cannot be made fails the test."""
    try:
        ns = _make_netns()
    except NoNetns as exc:
        if os.environ.get("CI") == "true":
            pytest.fail(f"CI requires Chromium in a network namespace of its own: {exc}")
        warnings.warn(
            f"Chromium shares the host's network ({exc}): a container started or stopped "
            "meanwhile can abort its requests (net::ERR_NETWORK_CHANGED)",
            stacklevel=2,
        )
        return None
    atexit.register(_remove_at_exit, ns.name, os.getpid())
    return ns


def _remove_at_exit(name: str, pid: int) -> None:
    if os.getpid() == pid:  # not in a forked child that happens to run exit handlers
        _remove_netns(name, pid)


@contextmanager
def chromium() -> Iterator[Any]:
    """A headless Chromium (Playwright's Browser) in the session's network namespace, where
    there is one; `expect(...)` waits for the deadline."""
    need(Path(CHROMIUM).exists(), "Debian's chromium is not installed")
    from playwright.sync_api import expect, sync_playwright

    ns = browser_netns()
    expect.set_options(timeout=DEADLINE_MS)
    with sync_playwright() as p:
        if ns is None:
            b = p.chromium.launch(executable_path=CHROMIUM, args=LAUNCH_ARGS)
        else:
            env = {**os.environ, "RTAX_BROWSER_NETNS": ns.name, "RTAX_BROWSER_CHROMIUM": CHROMIUM}
            b = p.chromium.launch(executable_path=str(IN_NETNS), args=LAUNCH_ARGS, env=env)
        try:
            if ns is not None and not _ip("netns", "pids", ns.name).split():
                raise AssertionError(f"Chromium started, but not in network namespace {ns.name}")
            yield b
        finally:
            b.close()


@contextmanager
def new_page(browser: Any, **options: Any) -> Iterator[Any]:
    """A new page of `browser` (`options` as Browser.new_page takes them) whose every wait has
    the suite's deadline; closed afterwards. If the test fails while it is open, the page's
    screenshot, text and failed requests are kept with the failure (what it showed when a
    wait ran out, and why)."""
    page = browser.new_page(**options)
    page.set_default_timeout(DEADLINE_MS)
    page.set_default_navigation_timeout(DEADLINE_MS)
    failed: list[str] = []
    page.on("requestfailed", lambda r: failed.append(f"{r.method} {r.url}: {r.failure}"))
    page.on("response", lambda r: r.status >= 400 and failed.append(f"HTTP {r.status} {r.url}"))
    try:
        yield page
    except BaseException as exc:
        if failed:
            exc.add_note("failed requests:\n" + "\n".join(failed[-30:]))
        if any("ERR_NETWORK_CHANGED" in line for line in failed):
            ns = browser_netns()
            exc.add_note(
                "net::ERR_NETWORK_CHANGED: Chromium dropped requests because its network changed"
                + (
                    f" (the interfaces of its own namespace {ns.name}, which nothing should touch)"
                    if ns
                    else " (the host's: Docker adding or removing an interface; Chromium had no"
                    " network namespace of its own)"
                )
                + "; not the dashboard's failure"
            )
        _describe(page, exc)
        raise
    finally:
        page.close()


def _describe(page: Any, exc: BaseException) -> None:
    try:
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        shot = ARTIFACTS / f"failed-{os.getpid()}-{id(page):x}.png"
        page.screenshot(path=str(shot), full_page=True, timeout=10_000)
        text = page.inner_text("body", timeout=10_000)
        exc.add_note(f"the page at {page.url} ({shot}):\n{text[-3000:]}")
    except Exception as failed:  # the page may be what broke
        exc.add_note(f"the page at {page.url} could not be described: {failed}")


def _tail(path: Path, size: int = 4000) -> str:
    return path.read_bytes()[-size:].decode(errors="replace")


def free_port(address: str = LOOPBACK) -> int:
    with socket.socket() as s:
        s.bind((address, 0))
        return s.getsockname()[1]


@contextmanager
def dashboard(env: dict[str, str]) -> Iterator[str]:
    """`rtax dashboard` on a free port, with `env` added to this process's environment; yields
    its URL once its health endpoint answers. It listens where Chromium reaches it and nowhere
    else: the root end of the browser namespace's veth pair, or 127.0.0.1 without one (its
    `--address` flag, as docs/dashboard.md#serving has it; never every interface)."""
    ns = browser_netns()
    address = ns.host if ns else LOOPBACK
    port = free_port(address)
    full = {**os.environ, **env}
    full.pop("RTAX_DASHBOARD_ADDRESS", None)
    # Its output goes to a file among the artifacts, not a pipe nobody reads while it runs (a
    # full pipe would stop the server mid-write), and comes with a failure.
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    log = ARTIFACTS / f"dashboard-{port}.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "rtax", "dashboard", "--address", address, "--port", str(port)],
            cwd=ROOT,
            env=full,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    url = f"http://{address}:{port}"
    try:
        serving(f"{url}/_stcore/health", "rtax dashboard", proc, body=b"ok", log=log)
        yield url
    except BaseException as exc:
        exc.add_note(f"rtax dashboard's output ({log}):\n{_tail(log)}")
        raise
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:  # a grace before SIGKILL, not a wait on the test
            proc.kill()
            proc.wait()
