"""The dashboard in a real headless browser: `streamlit run`, every page loaded in Debian's
Chromium through Playwright, charts rendered, a filter that survives navigation, a CSV
downloaded and read back, the Capacity page's envelope from real load runs (`rtax burst`), a
projection slider dragged with the mouse, a copied link opened on a fresh server, no deployment
controls. Screenshots go to $RTAX_ARTIFACTS (default test-artifacts/)."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pandas as pd
import pytest
from playwright.sync_api import expect
from test_dashboard_slo import write_seeded
from test_dashboard_timeline import write_history

import rtax
from browser import ROOT, chromium, dashboard, new_page
from factories import make_record
from polling import deadline_s
from rtax.dashboard import explore
from rtax.store.database import Store

#: url path -> (title, minimum number of Plotly charts on a seeded database)
PAGES = {
    "": ("Overview", 0),
    "timeline": ("Timeline", 1),
    "cold_start": ("Cold start", 2),
    "paths": ("Paths", 0),
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
        timeout=deadline_s(300),
    )
    # real load runs on the floor: a sequential baseline, a burst of 20, a staggered ramp
    for shape in (["--shape", "sequential", "-n", "3"], ["-n", "20"],
                  ["--shape", "staggered", "--every", "50ms", "-n", "10"]):  # fmt: skip
        subprocess.run(
            [sys.executable, "-m", "rtax", "burst", *shape, "--db", str(path), "--quiet"],
            check=True,
            timeout=deadline_s(300),
        )
    with Store(path) as store:
        # the seeded series ran the floor's toolchain, so they are comparable to it
        floor = store.runs.floor_toolchain()
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
    with new_page(browser, viewport={"width": 1400, "height": 1600}) as page:
        page.goto(f"{server}/{path}")
        page.get_by_role("heading", name=title, level=1).wait_for()
        if charts:
            page.locator(".js-plotly-plot").nth(charts - 1).wait_for()
        page.wait_for_load_state("networkidle")
        name = path or "overview"
        page.screenshot(path=str(artifacts / f"{name}.png"), full_page=True)
        assert page.locator('[data-testid="stException"]').count() == 0
        assert page.locator(".js-plotly-plot").count() >= charts


def test_filter_survives_navigation(browser, server: str) -> None:
    with new_page(browser, viewport={"width": 1400, "height": 1200}) as page:
        page.goto(server)
        page.get_by_role("heading", name="Overview", level=1).wait_for()
        tiers = page.get_by_test_id("stMultiSelect").filter(has_text="Tiers")
        tiers.locator("input").click()
        page.get_by_role("option", name="T2").click()
        page.keyboard.press("Escape")
        page.get_by_text("tiers: T2").wait_for()
        page.get_by_role("link", name="Decomposition").click()
        page.get_by_role("heading", name="Decomposition", level=1).wait_for()
        expect(tiers.get_by_text("T2").first).to_be_attached()  # the chip is still there
        page.get_by_role("link", name="Overview").click()
        page.get_by_text("tiers: T2").wait_for()


def test_download_csv(browser, server: str, seeded_db: Path, tmp_path: Path) -> None:
    with new_page(browser, accept_downloads=True) as page:
        page.goto(f"{server}/data")
        button = page.get_by_role("button", name="Download runs (CSV)")
        button.wait_for()
        with page.expect_download() as info:
            button.click()
        target = tmp_path / "runs.csv"
        info.value.save_as(target)
    frame = pd.read_csv(target)
    with Store(seeded_db, create=False) as store:
        assert len(frame) == store.runs.count()
    assert frame["run_id"].is_unique


def test_capacity_shows_the_envelope(browser, server: str, seeded_db: Path, artifacts) -> None:
    """The envelope of the real load runs, as `rtax.analysis.envelope` fits them from the file."""
    from rtax.analysis import envelope

    with Store(seeded_db, create=False) as store:
        loads = store.loads.read()
        fitted = envelope.fit(
            envelope.points(loads, store.loads.rollouts(list(loads["load_id"])))
        ).iloc[0]
    held = fitted["held_concurrency"]
    with new_page(browser, viewport={"width": 1400, "height": 2400}) as page:
        page.goto(f"{server}/capacity")
        page.get_by_role("heading", name="Envelope").wait_for()
        metric = page.get_by_test_id("stMetric").filter(has_text="local T0: concurrency held")
        metric.wait_for()
        value = metric.get_by_test_id("stMetricValue").inner_text()
        assert value == ("none" if held != held else f"{held:g}")
        page.locator(".js-plotly-plot").nth(1).wait_for()
        assert page.get_by_text("p95 bound").count() >= 1  # the bound drawn in the chart
        page.wait_for_load_state("networkidle")
        page.screenshot(path=str(artifacts / "capacity-envelope.png"), full_page=True)
        assert page.locator('[data-testid="stException"]').count() == 0


def test_no_deployment_controls_and_a_footer(browser, server: str, seeded_db: Path) -> None:
    """A monitoring tool's toolbar: no "Deploy" button; under the page, the database, the
    newest run's age and the rtax version."""
    with new_page(browser, viewport={"width": 1400, "height": 1200}) as page:
        page.goto(f"{server}/cold_start")
        page.get_by_role("heading", name="Cold start", level=1).wait_for()
        footer = page.get_by_text(f"Database {seeded_db}")
        footer.wait_for()
        assert "newest run" in footer.inner_text() and f"rtax {rtax.__version__}" in (
            footer.inner_text()
        )
        page.get_by_test_id("stHeader").wait_for()
        assert page.get_by_test_id("stAppDeployButton").count() == 0
        assert page.get_by_role("button", name="Deploy").count() == 0


# What the projection test reads, as locators: every read is a retrying `expect(...)`, since a
# rerun redraws the page piece by piece (a stale chart stays beside the new one for a moment).


def _thumb(page, key: str):
    return page.locator(f".st-key-{key} [data-testid=stSliderThumbValue]")


def _drag_slider(page, key: str, options: int, to_index: int) -> None:
    """Drag a slider's thumb with the mouse (press, move in steps, release) to the position
    of option `to_index` of `options` along its track."""
    widget = page.locator(f".st-key-{key}")
    thumb = widget.locator("[data-testid=stSliderThumbValue]").locator("..")
    track = widget.locator("[data-orientation=horizontal][style*=touch-action]")
    t, k = thumb.bounding_box(), track.bounding_box()
    assert t is not None and k is not None
    page.mouse.move(t["x"] + t["width"] / 2, t["y"] + t["height"] / 2)
    page.mouse.down()
    y = k["y"] + k["height"] / 2
    page.mouse.move(k["x"] + k["width"] * to_index / (options - 1), y, steps=15)
    page.mouse.up()


def _metric(page, label: str):
    return page.get_by_test_id("stMetric").filter(has_text=label).get_by_test_id("stMetricValue")


def _bars(page):
    return page.locator(".js-plotly-plot text.bartext")


def test_a_projection_slider_moved_with_the_mouse_and_a_link_that_reproduces_the_view(
    browser, server: str, seeded_db: Path
) -> None:
    """50-action trajectories: docker 3.4 s, local 6.0 s (one run each). At 1 M trajectories
    docker takes 944 worker-hours and local 722 more; dragged to 10 M, 9,444 and 7,222. The
    footer's link, opened in a new page on a freshly started server (whose first request it
    is), shows the same filters, inputs and figures."""
    with new_page(browser, viewport={"width": 1400, "height": 1600}) as page:
        page.goto(f"{server}/projection?proj_steps=50")
        page.get_by_role("heading", name="Projection", level=1).wait_for()
        tiers = page.get_by_test_id("stMultiSelect").filter(has_text="Tiers")
        tiers.locator("input").click()  # a sidebar filter, chosen by hand
        page.get_by_role("option", name="T2").click()
        page.keyboard.press("Escape")
        extra = "Extra hours of the slowest over the best, real"
        expect(page.get_by_test_id("stMetric").filter(has_text=extra)).to_contain_text("722 h")
        expect(_bars(page)).to_have_text(["944 h", "1,667 h"])
        expect(_thumb(page, "proj_trajectories__slider")).to_have_text("1 M", use_inner_text=True)

        options = len(explore.log_values(1_000, 100_000_000))
        _drag_slider(page, "proj_trajectories__slider", options, to_index=16)  # 10 M
        box = page.locator(".st-key-proj_trajectories input")
        expect(box).to_have_value("10000000")  # the exact box follows
        expect(page.get_by_test_id("stMetric").filter(has_text=extra)).to_contain_text("7,222 h")
        expect(_thumb(page, "proj_trajectories__slider")).to_have_text("10 M", use_inner_text=True)
        # the whole list, retried until the rerun's chart has replaced the old one (its stale
        # bars stay in the page for a moment beside the new ones)
        expect(_bars(page)).to_have_text(["9,444 h", "16,667 h"])
        changed = page.get_by_text("What changed: worker-hours of docker 944 h → 9,444 h")
        expect(changed.first).to_be_attached()

        link = page.get_by_test_id("stCode").last
        expect(link).to_contain_text("proj_trajectories=10000000")
        copied = link.inner_text().strip()
    assert copied.startswith(f"{server}/projection?")
    assert {"f_tiers=T2", "proj_steps=50", "proj_trajectories=10000000"} <= set(
        copied.split("?", 1)[1].split("&")
    )
    with (
        dashboard({"RTAX_DB": str(seeded_db)}) as fresh,
        new_page(browser, viewport={"width": 1400, "height": 1600}) as again,
    ):
        again.goto(copied.replace(server, fresh))
        again.get_by_role("heading", name="Projection", level=1).wait_for()
        expect(again.locator(".st-key-proj_trajectories input")).to_have_value("10000000")
        expect(again.locator(".st-key-proj_steps input")).to_have_value("50")
        expect(_thumb(again, "proj_trajectories__slider")).to_have_text("10 M", use_inner_text=True)
        tiers = again.get_by_test_id("stMultiSelect").filter(has_text="Tiers")
        expect(tiers).to_contain_text("T2")  # the sidebar's filter came with the link
        expect(_metric(again, extra)).to_have_text("7,222 h", use_inner_text=True)
        expect(_bars(again)).to_have_text(["9,444 h", "16,667 h"])


def test_a_snapshot_of_the_table_in_view(browser, server: str, tmp_path: Path) -> None:
    """The Overview opened on a link with a tier chosen: its table's snapshot is named by the
    filters and holds the raw machine columns at full precision (docker's one T2 S=10 episode
    of 1.4 s is 1.4, not the grid's "1.40 s")."""
    with new_page(browser, accept_downloads=True, viewport={"width": 1400, "height": 1600}) as page:
        page.goto(f"{server}/?f_tiers=T2")
        page.get_by_text("tiers: T2").first.wait_for()
        page.get_by_test_id("stDataFrame").first.wait_for()
        button = page.get_by_role("button", name="Download this table (CSV)").first
        with page.expect_download() as info:
            button.click()
        assert info.value.suggested_filename == "rtax-overview-all-time-T2.csv"
        target = tmp_path / info.value.suggested_filename
        info.value.save_as(target)
    frame = pd.read_csv(target)
    assert set(frame["tier"]) == {"T2"}
    assert {"ttfc_p50_s", "episode_p50_s", "episode_n", "last_probe_age_s"} <= set(frame.columns)
    docker = frame[(frame["series"] == "docker") & (frame["steps"] == 10)].iloc[0]
    assert docker["episode_p50_s"] == 1.4 and docker["episode_n"] == 1


def test_the_status_card_shows_the_error_budget_left(browser, tmp_path: Path, artifacts) -> None:
    """The objectives of tests/test_dashboard_slo.py's configuration over its rollouts: the
    docker card says 50 % of docker-start's budget is left (1 of 200 bad, 2 allowed) and 0.5 %
    of success's; the Timeline charts and lists the same budgets."""
    folder = write_seeded(tmp_path)
    env = {"RTAX_DB": str(folder / "rtax.db"), "RTAX_CONFIG": str(folder / "rtax.toml")}
    with dashboard(env) as url, new_page(browser, viewport={"width": 1400, "height": 1600}) as page:
        page.goto(url)
        page.get_by_role("heading", name="Overview", level=1).wait_for()
        # the docker card's figures (its p50 is docker's 300 ms), then its two budgets
        card = page.get_by_test_id("stMarkdownContainer").filter(has_text="p50 300 ms")
        budget = card.get_by_text("error budget left 50.0% · docker-start (1 of 200 bad in 28d)")
        expect(budget).to_be_visible()
        expect(card).to_contain_text("error budget left 0.5% · success (1 of 201 bad in 28d)")
        page.wait_for_load_state("networkidle")
        page.screenshot(path=str(artifacts / "overview-budgets.png"), full_page=True)
        page.goto(f"{url}/timeline")
        page.get_by_role("heading", name="Objectives").wait_for()
        expect(page.locator(".js-plotly-plot")).to_have_count(2)  # the timeline and the budgets
        expect(page.locator(".js-plotly-plot").last).to_contain_text("docker · T0 · docker-start")
        page.screenshot(path=str(artifacts / "timeline-objectives.png"), full_page=True)
        assert page.locator('[data-testid="stException"]').count() == 0


def test_the_timeline_draws_a_maintenance_window_and_an_accepted_baseline(
    browser, tmp_path: Path, artifacts
) -> None:
    """tests/test_dashboard_timeline.py's history, built with the store's API: docker's change
    accepted as the new baseline (its span ends where the new level was accepted, marked
    there), its acknowledged incident (which puts docker in the default selection), the store's
    maintenance window and the configuration's, each drawn with its text on the chart."""
    folder = write_history(tmp_path)
    env = {"RTAX_DB": str(folder / "rtax.db"), "RTAX_CONFIG": str(folder / "rtax.toml")}
    with dashboard(env) as url, new_page(browser, viewport={"width": 1400, "height": 1600}) as page:
        page.goto(f"{url}/timeline")
        page.get_by_role("heading", name="Timeline", level=1).wait_for()
        chart = page.locator(".js-plotly-plot").first
        texts = chart.locator(".annotation-text")  # the annotations' SVG text
        expect(texts).to_have_count(5)
        assert sorted(texts.all_text_contents()) == [
            "#1 accepted as the new baseline",
            "incident #1 · resolved: baseline",
            "incident #2 · acknowledged",
            "maintenance: kernel upgrade",
            "maintenance: registry migration",
        ]
        series = page.get_by_test_id("stMultiSelect").filter(has_text="Series")
        expect(series).to_contain_text("docker · T0")  # chosen by default: it needs attention
        expect(page.get_by_role("heading", name="Incidents")).to_be_visible()  # the table below
        page.wait_for_load_state("networkidle")
        page.screenshot(path=str(artifacts / "timeline-baseline-maintenance.png"), full_page=True)
        assert page.locator('[data-testid="stException"]').count() == 0


def test_the_paths_view_shows_four_real_launch_paths_per_runtime(
    browser, tmp_path: Path, artifacts: Path, runner_image: str, gvisor: None
) -> None:
    """docs/measurement.md#launch-paths: rollouts measured now on the real engine, cold, warm,
    restore and resume on docker and docker-gvisor (two each), shown on the Paths page: a row
    per substrate and path, with n, and the two snapshots the restores came from."""
    from rtax.core import workloads
    from rtax.core.kinds import NAMED
    from rtax.rollouts.rollout import run_rollout
    from rtax.settings.pool import PoolSettings
    from rtax.substrates.docker.substrate import DockerSubstrate
    from rtax.substrates.pool import WarmPool
    from rtax.substrates.restore import Restorer

    path = tmp_path / "paths.db"
    with Store(path) as store:
        for name in ("docker", "docker-gvisor"):

            def inner(name: str = name) -> DockerSubstrate:
                return DockerSubstrate(name=name, **NAMED[name][1])

            launches = [
                inner(),
                WarmPool(inner(), PoolSettings(1), rollout_lifetime_s=3720),
                Restorer(inner(), on_snapshot=store.snapshots.add),
                WarmPool(inner(), PoolSettings(1), rollout_lifetime_s=3720, paused=True),
            ]
            for sub in launches:
                try:
                    sub.prepare(lambda _: None)
                    for _ in range(2):
                        record = run_rollout(sub, workloads.build("T0"))
                        assert record.ok, record.run
                        store.save_rollout(record)
                finally:
                    sub.close()
    with (
        dashboard({"RTAX_DB": str(path)}) as url,
        new_page(browser, viewport={"width": 1400, "height": 1200}) as page,
    ):
        page.goto(f"{url}/paths")
        page.get_by_role("heading", name="Paths", level=1).wait_for()
        grid = page.get_by_test_id("stDataFrame").first
        grid.wait_for()
        for name in ("docker", "docker-gvisor"):
            for launch in ("cold", "warm", "restore", "resume"):
                expect(grid).to_contain_text(launch)
            expect(grid).to_contain_text(name)
        snapshots = page.get_by_test_id("stDataFrame").nth(1)
        expect(snapshots).to_contain_text("docker-gvisor")
        page.wait_for_load_state("networkidle")
        page.screenshot(path=str(artifacts / "paths.png"), full_page=True)
        assert page.locator('[data-testid="stException"]').count() == 0
    with Store(path) as store:
        shown = store.runs.read(columns=["substrate", "launch_type"])
    counts = shown.groupby(["substrate", "launch_type"]).size()
    assert (counts == 2).all() and len(counts) == 8
