"""The real browser and the real dashboard server for the browser tests: Debian's Chromium
through Playwright, and `rtax dashboard` (the launcher `make run` uses) on a free port
(tests/test_browser.py, tests/test_live_monitor.py, tests/test_load_bursts.py).

Every browser wait has the suite's one deadline (tests/polling.py): a page from `new_page` has it
as its default timeout for navigation, locators, load states and downloads, and `chromium` sets
it for `expect(...)` assertions, so a test names no timeout of its own (Playwright's 30 s and
5 s defaults are what failed on a busy machine)."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from polling import DEADLINE_MS, serving

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


def need(condition: bool, reason: str) -> None:
    """Skip without `condition`, but fail under CI, which must run every browser test."""
    if condition:
        return
    if os.environ.get("CI") == "true":
        pytest.fail(f"CI requires the browser test: {reason}")
    pytest.skip(f"{reason}; `make test` as root installs it")


@contextmanager
def chromium() -> Iterator[Any]:
    """A headless Chromium (Playwright's Browser); `expect(...)` waits for the deadline."""
    need(Path(CHROMIUM).exists(), "Debian's chromium is not installed")
    from playwright.sync_api import expect, sync_playwright

    expect.set_options(timeout=DEADLINE_MS)
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=LAUNCH_ARGS)
        try:
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
            exc.add_note(
                "net::ERR_NETWORK_CHANGED: Chromium dropped requests because the host's network "
                "changed (Docker adding or removing an interface); not the dashboard's failure"
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


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextmanager
def dashboard(env: dict[str, str]) -> Iterator[str]:
    """`rtax dashboard` on its default address (127.0.0.1) and a free port, with `env` added
    to this process's environment; yields its URL once its health endpoint answers."""
    port = free_port()
    full = {**os.environ, **env}
    full.pop("RTAX_DASHBOARD_ADDRESS", None)
    # Its output goes to a file among the artifacts, not a pipe nobody reads while it runs (a
    # full pipe would stop the server mid-write), and comes with a failure.
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    log = ARTIFACTS / f"dashboard-{port}.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "rtax", "dashboard", "--port", str(port)],
            cwd=ROOT,
            env=full,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    url = f"http://127.0.0.1:{port}"
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
