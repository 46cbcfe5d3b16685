"""The objectives on the dashboard, under Streamlit's AppTest: each status card's error budget
left and the Timeline's budgets and burn rates, worked out by hand from known rollouts and a
configuration of known objectives."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import streamlit as st
from streamlit.testing.v1 import AppTest

from factories import make_record
from polling import DEADLINE_S
from rtax.store.database import Store

APP = str(Path(__file__).resolve().parent.parent / "app.py")
CONFIG = """
database = "rtax.db"
[[substrates]]
name = "local"
kind = "local"
[[substrates]]
name = "docker"
kind = "docker"
[[slos]]
name = "docker-start"
series = { substrate = "docker", tier = "T0" }
time_to_first_command = "1s"
target = 0.99
[[slos]]
name = "success"
series = { tier = "T0" }
success = true
target = 0.995
"""


@pytest.fixture(scope="module")
def seeded(tmp_path_factory) -> Path:
    return write_seeded(tmp_path_factory.mktemp("slo"))


def write_seeded(folder: Path) -> Path:
    """`CONFIG` as folder/rtax.toml and its database folder/rtax.db (the browser test's too):
    docker T0: 200 rollouts a minute apart from 2.5 minutes ago, 0.3 s each but one of 1.5 s
    (35.5 minutes ago), plus one create_timeout (an hour ago) and one harness_error; local T0:
    10 rollouts of 0.05 s. (Half minutes keep every rollout 30 s clear of a window's edge.)

    docker-start (1 s, 99 %): 200 events (the ok ones), 1 bad, 2 allowed: 50 % left. Over 1 h
    (the 58 from 2.5 to 59.5 minutes ago) 1 bad: (1 / 58) / 0.01 = 1.72x; over 5 min (2.5, 3.5
    and 4.5 minutes ago) 0x. success (99.5 %): docker 201 events (the harness error is
    none), 1 bad, 1.005 allowed: 1 - 1 / 1.005 = 0.5 % left; local 10 of 10 good: 100 %."""
    (folder / "rtax.toml").write_text(CONFIG)
    now = datetime.now(UTC)

    def at(minutes: float) -> str:
        return (now - timedelta(minutes=minutes)).isoformat(timespec="microseconds")

    with Store(folder / "rtax.db") as store:
        for i in range(200):
            ttfc = 1.5 if i == 33 else 0.3
            store.save_rollout(
                make_record(f"d{i}", substrate="docker", kind="docker", started_at=at(2.5 + i),
                            time_to_first_command_s=ttfc)
            )  # fmt: skip
        for name, cls, minutes in (("t", "create_timeout", 60.5), ("h", "harness_error", 3.5)):
            store.save_rollout(
                make_record(name, substrate="docker", kind="docker", status="failed",
                            error_class=cls, started_at=at(minutes), time_to_first_command_s=None)
            )  # fmt: skip
        for i in range(10):
            store.save_rollout(
                make_record(f"l{i}", started_at=at(3 + i), time_to_first_command_s=0.05)
            )
    return folder


def _app(folder: Path, monkeypatch: pytest.MonkeyPatch, page: str | None = None) -> AppTest:
    monkeypatch.setenv("RTAX_DB", str(folder / "rtax.db"))
    monkeypatch.setenv("RTAX_CONFIG", str(folder / "rtax.toml"))
    st.cache_data.clear()
    at = AppTest.from_file(APP, default_timeout=DEADLINE_S)
    at.run()
    if page:
        at.switch_page(page)
        at.run()
    assert not at.exception, [e.value for e in at.exception]
    return at


def test_each_card_shows_the_budget_left_of_its_objectives(seeded: Path, monkeypatch) -> None:
    at = _app(seeded, monkeypatch)
    text = "\n".join(m.value for m in at.markdown)
    assert "error budget left 50.0% · docker-start (1 of 200 bad in 28d)" in text
    assert "error budget left 0.5% · success (1 of 201 bad in 28d)" in text
    assert "error budget left 100.0% · success (0 of 10 bad in 28d)" in text
    # local is covered by the success objective only
    assert text.count("docker-start") == 1


def test_the_timeline_lists_budgets_and_burn_rates(seeded: Path, monkeypatch) -> None:
    at = _app(seeded, monkeypatch, "pages/timeline.py")
    assert "Objectives" in [h.value for h in at.subheader]
    tables = [d.value for d in at.dataframe if "objective" in d.value.columns]
    assert len(tables) == 1
    shown = tables[0].set_index(["series", "objective"])
    start = shown.loc[("docker · T0", "docker-start")]
    assert (start["events"], start["bad"]) == (200, 1)
    assert start["allowed"] == pytest.approx(2.0)
    assert start["budget_left_share"] == pytest.approx(0.5)
    assert start["burn_1h"] == pytest.approx(100 / 58)
    assert start["burn_5m"] == 0.0 and start["alerting"] == ""
    success = shown.loc[("docker · T0", "success")]
    assert success["budget_left_share"] == pytest.approx(1 - 1 / 1.005)
    assert shown.loc[("local · T0", "success"), "budget_left_share"] == 1.0
    assert any("objective that covers a series shown" in c.value for c in at.caption)
