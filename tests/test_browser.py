"""The dashboard in a real headless browser: `streamlit run`, every page loaded in Debian's
Chromium through Playwright, charts rendered, a filter that survives navigation, a CSV
downloaded and read back, the Capacity page's envelope from real load runs (`rtax burst`).
Screenshots go to $RTAX_ARTIFACTS (default test-artifacts/)."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pandas as pd
import pytest

from browser import ROOT, chromium, dashboard
from factories import make_record
from rtax.store import Store

#: url path -> (title, minimum number of Plotly charts on a seeded database)
PAGES = {
    "": ("Overview", 0),
    "timeline": ("Timeline", 1),
    "cold_start": ("Cold start", 2),
    "decomposition": ("Decomposition", 1),
    "amortization": ("Amortization", 2),
    "projection": ("Projection", 1),
    "capacity": ("Capacity", 2),
    "data": ("Data", 0),
}


@pytest.fixture(scope="module")
def browser():
    with chromium() as b:
        yield b


@pytest.fixture(scope="module")
def seeded_db(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("browser") / "rtax.db"
    # real samples, measured now on the local substrate (the floor)
    subprocess.run(
        [
            sys.executable,
            "-m",
            "rtax",
            "probe",
            "--tier",
            "T0",
            "--repeat",
            "2",
            "--db",
            str(path),
            "--quiet",
        ],
        check=True,
        timeout=300,
    )
    # real load runs on the floor: a sequential baseline, a burst of 20, a staggered ramp
    for shape in (["--shape", "sequential", "-n", "3"], ["-n", "20"],
                  ["--shape", "staggered", "--every", "50ms", "-n", "10"]):  # fmt: skip
        subprocess.run(
            [sys.executable, "-m", "rtax", "burst", *shape, "--db", str(path), "--quiet"],
            check=True,
            timeout=300,
        )
    with Store(path) as store:
        # the seeded series ran the floor's toolchain, so they are comparable to it
        floor = store.floor_toolchain()
        assert floor is not None, "the local probe recorded no toolchain"
        for i, (sub, tier, steps, ep) in enumerate(
            [
                ("local", "T0", 0, 0.02),
                ("local", "T0", 0, 0.03),
                ("docker", "T0", 0, 0.3),
                ("docker", "T0", 0, 0.35),
                ("local", "T2", 10, 1.5),
                ("local", "T2", 50, 6.0),
                ("docker", "T2", 10, 1.4),
                ("docker", "T2", 50, 3.4),
            ]
        ):
            store.save_rollout(
                make_record(
                    f"b{i}",
                    substrate=sub,
                    tier=tier,
                    steps=steps,
                    episode_s=ep,
                    n_actions=steps or 1,
                    started_at=f"2026-01-01T00:00:0{i}+00:00",
                    toolchain=floor,
                )
            )
    return path


@pytest.fixture(scope="module")
def server(seeded_db: Path) -> Iterator[str]:
    with dashboard({"RTAX_DB": str(seeded_db)}) as url:
        yield url


@pytest.fixture(scope="module")
def artifacts() -> Path:
    path = Path(os.environ.get("RTAX_ARTIFACTS", ROOT / "test-artifacts")) / "screenshots"
    path.mkdir(parents=True, exist_ok=True)
    return path


@pytest.mark.parametrize("path", PAGES, ids=lambda p: p or "overview")
def test_page_renders(browser, server: str, artifacts: Path, path: str) -> None:
    title, charts = PAGES[path]
    page = browser.new_page(viewport={"width": 1400, "height": 1600})
    try:
        page.goto(f"{server}/{path}")
        page.get_by_role("heading", name=title, level=1).wait_for(timeout=60_000)
        if charts:
            page.locator(".js-plotly-plot").nth(charts - 1).wait_for(timeout=60_000)
        page.wait_for_load_state("networkidle")
        name = path or "overview"
        page.screenshot(path=str(artifacts / f"{name}.png"), full_page=True)
        assert page.locator('[data-testid="stException"]').count() == 0
        assert page.locator(".js-plotly-plot").count() >= charts
    finally:
        page.close()


def test_filter_survives_navigation(browser, server: str) -> None:
    page = browser.new_page(viewport={"width": 1400, "height": 1200})
    try:
        page.goto(server)
        page.get_by_role("heading", name="Overview", level=1).wait_for(timeout=60_000)
        tiers = page.get_by_test_id("stMultiSelect").filter(has_text="Tiers")
        tiers.locator("input").click()
        page.get_by_role("option", name="T2").click()
        page.keyboard.press("Escape")
        page.get_by_text("tiers: T2").wait_for(timeout=15_000)
        page.get_by_role("link", name="Decomposition").click()
        page.get_by_role("heading", name="Decomposition", level=1).wait_for(timeout=60_000)
        assert tiers.get_by_text("T2").count() >= 1  # the chip is still there
        page.get_by_role("link", name="Overview").click()
        page.get_by_text("tiers: T2").wait_for(timeout=15_000)
    finally:
        page.close()


def test_download_csv(browser, server: str, seeded_db: Path, tmp_path: Path) -> None:
    page = browser.new_page(accept_downloads=True)
    try:
        page.goto(f"{server}/data")
        button = page.get_by_role("button", name="Download runs (CSV)")
        button.wait_for(timeout=60_000)
        with page.expect_download(timeout=60_000) as info:
            button.click()
        target = tmp_path / "runs.csv"
        info.value.save_as(target)
    finally:
        page.close()
    frame = pd.read_csv(target)
    with Store(seeded_db, create=False) as store:
        assert len(frame) == store.count("runs")
    assert frame["run_id"].is_unique


def test_capacity_shows_the_envelope(browser, server: str, seeded_db: Path, artifacts) -> None:
    """The envelope of the real load runs, as `rtax.envelope` fits them from the file."""
    from rtax import envelope

    with Store(seeded_db, create=False) as store:
        loads = store.load_runs()
        fitted = envelope.fit(
            envelope.points(loads, store.load_rollouts(list(loads["load_id"])))
        ).iloc[0]
    held = fitted["held_concurrency"]
    page = browser.new_page(viewport={"width": 1400, "height": 2400})
    try:
        page.goto(f"{server}/capacity")
        page.get_by_role("heading", name="Envelope").wait_for(timeout=60_000)
        metric = page.get_by_test_id("stMetric").filter(has_text="local T0: concurrency held")
        metric.wait_for(timeout=60_000)
        value = metric.get_by_test_id("stMetricValue").inner_text()
        assert value == ("none" if held != held else f"{held:g}")
        page.locator(".js-plotly-plot").nth(1).wait_for(timeout=60_000)
        assert page.get_by_text("p95 bound").count() >= 1  # the bound drawn in the chart
        page.wait_for_load_state("networkidle")
        page.screenshot(path=str(artifacts / "capacity-envelope.png"), full_page=True)
        assert page.locator('[data-testid="stException"]').count() == 0
    finally:
        page.close()
