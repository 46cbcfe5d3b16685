"""The real browser and the real dashboard server for the browser tests: Debian's Chromium
through Playwright, and `rtax dashboard` (the launcher `make run` uses) on a free port
(tests/test_browser.py, tests/test_live_monitor.py)."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parent.parent
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
    """A headless Chromium (Playwright's Browser)."""
    need(Path(CHROMIUM).exists(), "Debian's chromium is not installed")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=LAUNCH_ARGS)
        try:
            yield b
        finally:
            b.close()


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
    proc = subprocess.Popen(
        [sys.executable, "-m", "rtax", "dashboard", "--port", str(port)],
        cwd=ROOT,
        env=full,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    try:
        while True:
            assert proc.poll() is None, proc.stdout.read().decode() if proc.stdout else ""
            try:
                with urllib.request.urlopen(f"{url}/_stcore/health", timeout=2) as r:
                    if r.read() == b"ok":
                        break
            except OSError:
                pass
            assert time.monotonic() < deadline, "streamlit did not answer within 60 s"
            time.sleep(0.2)  # polling the health endpoint with a deadline
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
