"""The live monitor end to end (issue 13's acceptance): real rollouts on the Daytona emulation
(the real SDK over real HTTP, every sandbox a real container), a slowdown injected into its
sandbox start, the scheduler's detection pass after every rollout, webhook alerts posted to a
real HTTP receiver, and the status board and the Timeline in real headless Chromium: a
degraded card and an open incident's marker while the slowdown lasts, both clear once it
stops, and exactly one alert per incident event."""

from __future__ import annotations

import logging
import os
import statistics
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from browser import ROOT, chromium, dashboard, new_page
from polling import wait_for
from rtax.analysis.rules import Alerts, Detection, Rule
from rtax.core import workloads
from rtax.emulation.daytona import DaytonaEmulation
from rtax.rollouts.rollout import run_rollout
from rtax.service import alerts, detection
from rtax.store.database import Store
from rtax.substrates import get_substrate
from webhook import Receiver

ARTIFACTS = Path(os.environ.get("RTAX_ARTIFACTS", ROOT / "test-artifacts")) / "screenshots"
#: How much later every sandbox starts while the slowdown lasts.
SLOWDOWN_S = 1.5
#: Rollouts before the slowdown. The detector sees ranks, so its evidence grows with the number
#: of samples on each side, not with the size of the change (docs/alerts.md#detection): with 20
#: before it, one cold outlier among them (the emulation's first sandbox) delayed a 5x
#: slowdown to its 12th sample; 40 give it a clear baseline.
BASELINE = 40
#: The most slow rollouts the test waits through for the incident (it opens after 5 to 8).
SLOW_AT_MOST = 20
RULE = Rule("ttfc-change", "time_to_first_command", "change_above", 1.5)
#: The shipped detector, on a shorter window and recovery so the test takes fewer rollouts.
DETECTION = Detection(window=60, recovery_samples=4)


@pytest.fixture(scope="module")
def emulation(runner_image: str) -> Iterator[DaytonaEmulation]:
    with DaytonaEmulation(image=runner_image) as emu:
        yield emu


@pytest.fixture(scope="module")
def daytona(emulation: DaytonaEmulation) -> Iterator[Any]:
    sub = get_substrate("daytona", **emulation.substrate_params(), rate_limit_base_s=0.01)
    yield sub
    sub.close()


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    with chromium() as b:
        yield b


class Monitor:
    """Rollouts stored one by one, each followed by the scheduler's detection pass, with the
    scheduler's notifier posting to the receiver."""

    def __init__(self, db: Path, substrate: Any, receiver: Receiver) -> None:
        self.db = db
        self.substrate = substrate
        self.settings = Alerts(webhook=receiver.url, rules=(RULE,))
        self.config = SimpleNamespace(detection=DETECTION, alerts=self.settings)
        self.notifier = alerts.start(db, self.settings)
        self.opened: list[int] = []
        self.resolved: list[int] = []
        self.ttfc: list[float] = []
        self.n = 0

    def rollouts(self, count: int) -> None:
        for _ in range(count):
            self.n += 1
            record = run_rollout(self.substrate, workloads.build("T0"), run_id=f"live-{self.n}")
            assert record.ok, record.run
            self.ttfc.append(float(record.run["time_to_first_command_s"]))
            with Store(self.db) as store:
                store.save_rollout(record)
            report = detection.run(
                lambda: Store(self.db), self.config, self.notifier, logging.getLogger("test")
            )
            assert report is not None
            self.opened += report.opened
            self.resolved += report.resolved


def _until(page: Any, check: Any, what: str) -> None:
    """Reload `page` until `check(page)` holds (the dashboard caches reads for 10 s, so every
    2 s is often enough), within the suite's deadline; a screenshot if it never does."""
    checks = 0

    def shown() -> bool:
        nonlocal checks
        if checks:  # the first check reads the page as it is; the later ones reload it
            page.reload()
        checks += 1
        page.wait_for_load_state("networkidle")
        return check(page)

    try:
        wait_for(shown, f"the dashboard to show {what}", interval_s=2.0)
    except AssertionError as exc:
        page.screenshot(path=str(ARTIFACTS / "live-monitor-timeout.png"), full_page=True)
        raise AssertionError(f"{exc}; the page: {page.inner_text('body')}") from None


def _state(page: Any) -> str:
    """The card's heading (its series and state) and the reasons below it."""
    page.get_by_role("heading", name="Overview", level=1).wait_for()
    card = page.get_by_test_id("stMarkdownContainer").filter(has_text="daytona [emulated] · T0")
    if not card.count():
        return ""
    reasons = page.get_by_test_id("stCaptionContainer").all_inner_texts()
    return " ".join([card.first.inner_text(), *reasons])


def _markers(page: Any) -> list[str]:
    page.get_by_role("heading", name="Timeline", level=1).wait_for()
    page.locator(".js-plotly-plot").first.wait_for()
    return page.locator(".js-plotly-plot .annotation-text").all_text_contents()  # SVG text


def test_a_slowdown_degrades_the_board_marks_the_timeline_alerts_once_and_clears(
    tmp_path: Path, daytona: Any, emulation: DaytonaEmulation, browser: Any
) -> None:
    db = tmp_path / "rtax.db"
    receiver = Receiver()
    live = Monitor(db, daytona, receiver)
    try:
        live.rollouts(BASELINE)
        assert live.opened == []
        base = statistics.median(live.ttfc)  # the first rollout may be a cold outlier
        limit = base + SLOWDOWN_S / 2
        config = tmp_path / "rtax.toml"
        config.write_text(
            f'database = "{db}"\n[[substrates]]\nname = "local"\nkind = "local"\n'
            f'[status]\nsamples = 4\np95_above = {{ "*" = "{limit:.3f}s" }}\n'
        )
        emulation.faults.delay("start", SLOWDOWN_S, times=None)
        live.rollouts(5)  # a new level needs 5 samples (min_segment)
        while not live.opened and live.n < BASELINE + SLOW_AT_MOST:
            live.rollouts(1)
        assert statistics.median(live.ttfc[BASELINE:]) > base + SLOWDOWN_S * 0.8  # it was slower
        assert len(live.opened) == 1, (live.opened, [round(t, 3) for t in live.ttfc])
        incident = live.opened[0]
        env = {"RTAX_DB": str(db), "RTAX_CONFIG": str(config)}
        with (
            dashboard(env) as url,
            new_page(browser, viewport={"width": 1400, "height": 1400}) as page,
        ):
            page.goto(url)
            _until(page, lambda p: "degraded" in _state(p), "a degraded card")
            text = _state(page)
            assert "1 open incident" in text and "p95 time-to-first-command" in text
            page.goto(f"{url}/timeline")
            _until(
                page,
                lambda p: f"incident #{incident} · open" in _markers(p),
                "the open incident's marker",
            )
            # the receiver got the opened alert, once
            wait_for(lambda: len(receiver.bodies) >= 1, "the opened alert")
            emulation.faults.clear()  # the slowdown stops
            live.rollouts(8)
            assert live.resolved == [incident] and live.opened == [incident]
            page.goto(url)
            _until(page, lambda p: "● up" in _state(p), "the card back up")
            page.goto(f"{url}/timeline")
            _until(
                page,
                lambda p: f"incident #{incident} · resolved: recovered" in _markers(p),
                "the incident resolved",
            )
            assert not [m for m in _markers(page) if m.endswith("· open")]
            assert page.locator('[data-testid="stException"]').count() == 0
        wait_for(lambda: len(receiver.bodies) >= 2, "the resolved alert")
        events = [(b["event"], b["incident"]["id"]) for b in receiver.bodies]
        assert events == [("opened", incident), ("resolved", incident)]
        opened = receiver.bodies[0]
        assert opened["incident"]["metric"] == "time_to_first_command"
        assert opened["incident"]["magnitude"] >= 1.5
        assert opened["text"].startswith("rtax incident opened: daytona T0 S=0 exec emulated")
    finally:
        if live.notifier is not None:
            live.notifier.stop()
        receiver.close()
        emulation.faults.clear()
