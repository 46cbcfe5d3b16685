"""The status board's rules (rtax.analysis.status) and the ``[status]`` table: each state from runs
whose verdict is worked out by hand, the stale limit from the plans, the card's 24-hour
figures from the store against values computed by hand, and every config mistake named."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from types import SimpleNamespace

import pandas as pd
import pytest
from streamlit.testing.v1 import AppTest

from factories import make_record
from polling import DEADLINE_S
from rtax.analysis import status
from rtax.analysis.status import StatusRules, judge
from rtax.core.series import Series
from rtax.dashboard import board, data
from rtax.settings import config
from rtax.store.database import Store

NOW = datetime(2026, 6, 1, 12, 0, tzinfo=UTC)
ROOT = Path(__file__).resolve().parent.parent
BASE = "[[substrates]]\nname = 'local'\nkind = 'local'\n"


#: Each outcome letter's error class: ``o`` ok, ``x`` a substrate failure, ``h`` and ``e``
#: rtax's own failures (a harness error, an engine error).
CLASSES = {"o": None, "x": "exec_error", "h": "harness_error", "e": "engine_error"}


def _runs(outcomes: str, ttfc: list[float] | None = None) -> pd.DataFrame:
    """Runs a minute apart, newest last (a minute ago), one per letter of `CLASSES`."""
    rows = []
    for i, c in enumerate(outcomes):
        rows.append(
            {
                "started_at": (NOW - timedelta(minutes=len(outcomes) - i)).isoformat(),
                "status": "ok" if c == "o" else "failed",
                "error_class": CLASSES[c],
                "time_to_first_command_s": (ttfc[i] if ttfc else 0.2) if c == "o" else None,
            }
        )
    return pd.DataFrame(rows)


DEFAULT = StatusRules()


def _judge(runs: pd.DataFrame, rules: StatusRules = DEFAULT, **kw):
    """`judge` with the last probe 60 s ago and the last rollout that reached the substrate
    as old as `runs` say (None: none of them did), unless given."""
    reached = [i for i, c in enumerate(runs["error_class"]) if c not in ("harness_error",
               "engine_error")]  # fmt: skip
    reached_age = 60.0 * (len(runs) - reached[-1]) if reached else None
    args = {"age_s": 60.0, "reached_age_s": reached_age, "stale_limit_s": 600.0,
            "open_incidents": 0, "substrate": "docker"}  # fmt: skip
    return judge(runs, rules=rules, **(args | kw))


def test_all_ok_is_up() -> None:
    assert _judge(_runs("o" * 10)) == ("up", ())


def test_the_last_three_failed_is_down_though_the_rate_is_70_percent() -> None:
    state, reasons = _judge(_runs("ooooooo" + "xxx"))
    assert state == "down" and reasons == ("the last 3 rollouts failed",)


def test_one_failure_in_ten_is_up_two_is_degraded() -> None:
    # 9/10 = 90% is not below 90%; 8/10 = 80% is
    assert _judge(_runs("oooxoooooo"))[0] == "up"
    state, reasons = _judge(_runs("oxoooxoooo"))
    assert state == "degraded" and reasons == ("success 80% of the last 10 < 90%",)


def test_below_half_is_down() -> None:
    state, reasons = _judge(_runs("xoxoxxxoxo"))  # 4 of 10, newest not three failures
    assert state == "down" and reasons == ("success 40% of the last 10 < 50%",)


def test_harness_errors_never_lower_the_state() -> None:
    # three of rtax's own failures last: the substrate answered for the 7 before, all ok
    assert _judge(_runs("ooooooohhh"))[0] == "up"


def test_every_recent_rollout_a_harness_error_is_unknown_with_the_reason() -> None:
    """Ten harness errors, the newest ten rollouts: none reached the substrate, so nothing says
    whether it is up; three hours before them it answered."""
    runs = _runs("o" * 5 + "h" * 10)
    state, reasons = _judge(runs, reached_age_s=3 * 3600.0, stale_limit_s=4 * 3600.0)
    assert state == "unknown"
    assert reasons == (
        "the last 10 rollouts never reached the substrate: harness_error ×10; the last that "
        "did 3.0 h ago",
    )
    state, reasons = _judge(_runs("e" * 2 + "h" * 8))  # none did in the board's week
    assert state == "unknown"
    assert reasons == (
        "the last 10 rollouts never reached the substrate: harness_error ×8, engine_error ×2; "
        "none did in the last 7 days",
    )


def test_staleness_counts_only_rollouts_that_reached_the_substrate() -> None:
    # probed a minute ago, but since 12 minutes ago only rtax's own errors: older than the 10-minute
    # limit, the evidence is gone; the series is unknown (still probed), not stale
    state, reasons = _judge(_runs("o" * 9 + "h" * 10 + "e"))
    assert state == "unknown"
    assert reasons == (
        "the last 11 rollouts never reached the substrate: harness_error ×10, engine_error ×1; "
        "the last that did 12 min ago (limit 10 min)",
    )
    # not probed at all within the limit: stale, whatever the rollouts were
    assert _judge(_runs("h" * 10), age_s=3_000.0)[0] == "stale"


def test_judged_on_the_newest_rollouts_that_reached_the_substrate() -> None:
    # newest first: two harness errors, then three failures: those three are the newest the
    # substrate answered for, so it is down; with seven ok before them, 7 of 10
    state, reasons = _judge(_runs("o" * 7 + "xxx" + "hh"))
    assert state == "down" and reasons == ("the last 3 rollouts failed",)
    # three harness errors are no samples: the newest that reached are eight ok and a failure
    state, reasons = _judge(_runs("x" + "o" * 8 + "hhh"))
    assert state == "degraded" and reasons == ("success 89% of the last 9 < 90%",)


def test_only_the_newest_samples_are_judged() -> None:
    # 10 failures long ago, then 10 ok: judged on the newest 10, the card is up again
    assert _judge(_runs("x" * 10 + "o" * 10))[0] == "up"


def test_p95_above_its_limit_is_degraded_with_n() -> None:
    # 10 samples 0.1..1.0: p95 by linear interpolation = 0.9 + 0.55 * 0.1 = 0.955 s
    ttfc = [0.1 * (i + 1) for i in range(10)]
    rules = StatusRules(p95_above_s={"docker": 0.9})
    state, reasons = _judge(_runs("o" * 10, ttfc), rules)
    assert state == "degraded"
    assert reasons == ("p95 time-to-first-command 955 ms (n=10) > 900 ms",)
    assert _judge(_runs("o" * 10, ttfc), StatusRules(p95_above_s={"docker": 0.96}))[0] == "up"
    # a limit for another substrate does not apply; "*" does
    assert _judge(_runs("o" * 10, ttfc), StatusRules(p95_above_s={"ec2": 0.5}))[0] == "up"
    assert _judge(_runs("o" * 10, ttfc), StatusRules(p95_above_s={"*": 0.5}))[0] == "degraded"


def test_an_open_incident_is_degraded() -> None:
    assert _judge(_runs("o" * 10), open_incidents=2) == ("degraded", ("2 open incidents",))
    # acknowledged (someone is on it): still open, still degraded, and the card says so
    assert _judge(_runs("o" * 10), open_incidents=2, acknowledged=1)[1] == (
        "2 open incidents (1 acknowledged)",
    )
    assert _judge(_runs("o" * 10), open_incidents=1, acknowledged=1)[1] == (
        "1 open incident (acknowledged)",
    )


def test_stale_comes_first() -> None:
    state, reasons = _judge(_runs("x" * 10), age_s=3_000.0, stale_limit_s=600.0)
    assert state == "stale" and reasons == ("last probe 50 min ago (limit 10 min)",)


def test_stale_limit_is_intervals_of_the_plan_that_probes_the_series() -> None:
    plans = [
        SimpleNamespace(substrates=("docker",), tier="T0", steps=0, mode=None, interval_s=300.0,
                        jitter_s=30.0),
        SimpleNamespace(substrates=("docker",), tier="T0", steps=0, mode=None, interval_s=60.0,
                        jitter_s=0.0),
        SimpleNamespace(substrates=("local",), tier="T0", steps=0, mode=None, interval_s=5.0,
                        jitter_s=0.0),
    ]  # fmt: skip
    series = {"substrate": "docker", "tier": "T0", "steps": 0, "mode": "exec"}
    assert status.stale_limit(series, plans, StatusRules()) == 180.0  # 3 x the 60 s plan
    other = {**series, "tier": "T2"}
    assert status.stale_limit(other, plans, StatusRules(stale_after_s=99.0)) == 99.0


def test_a_card_carries_the_days_figures_from_the_store(tmp_path: Path) -> None:
    """Through the store's summaries, as the Overview reads them: 24 hours' success and
    percentiles (worked out by hand), the newest rollouts' sparkline, the open incident."""
    now = datetime.now(UTC)
    with Store(tmp_path / "s.db") as store:
        values = [0.1, 0.2, 0.3, 0.4]
        for i, v in enumerate(values):
            store.save_rollout(
                make_record(f"r{i}", substrate="docker", kind="docker", time_to_first_command_s=v,
                            started_at=(now - timedelta(minutes=10 - i)).isoformat())
            )  # fmt: skip
        store.save_rollout(
            make_record("f", substrate="docker", kind="docker", status="failed",
                        error_class="exec_error",
                        started_at=(now - timedelta(minutes=1)).isoformat())
        )  # fmt: skip
        store.save_rollout(  # two days old: outside the day's figures
            make_record("old", substrate="docker", kind="docker", time_to_first_command_s=9.0,
                        started_at=(now - timedelta(days=2)).isoformat())
        )  # fmt: skip
        key = Series.of({"substrate": "docker", "tier": "T0", "steps": 0, "mode": "exec",
                         "fidelity": "real"}).key  # fmt: skip
        store.incidents.add({"series": key, "substrate": "docker", "tier": "T0", "steps": 0,
                            "mode": "exec", "fidelity": "real", "metric": "time_to_first_command",
                            "rule": "ttfc-change", "detector": "binseg", "start": now.isoformat(),
                            "opened_at": now.isoformat(), "alert_open": "off"})  # fmt: skip
        data.st.cache_data.clear()
        cards = data.status_board.__wrapped__(str(tmp_path / "s.db"), (None, (), (), (), ()))
    assert len(cards) == 1
    card = cards[0]
    assert card.label == "docker · T0" and card.key == key
    # the newest 6 (of samples=10): 5 ok, so 83% < 90%; and the open incident
    assert card.state == "degraded"
    assert card.reasons == ("success 83% of the last 6 < 90%", "1 open incident")
    assert card.runs_24h == 5 and card.success_24h == pytest.approx(0.8)
    assert card.ttfc_n == 4
    assert card.ttfc_p50_s == pytest.approx(0.25)  # (0.2 + 0.3) / 2
    assert card.ttfc_p95_s == pytest.approx(0.385)  # 0.3 + 0.85 * 0.1
    assert [v for _, v in card.spark] == [0.1, 0.2, 0.3, 0.4, None]  # the old one is not
    assert 0 <= card.last_age_s < 120


def test_sparkline_marks_failures_and_scales_by_log() -> None:
    svg = status.sparkline([("a", 0.1), ("b", 1.0), ("c", None), ("d", 10.0)], 300, 36)
    # log scale: 0.1, 1, 10 are evenly spaced from the bottom (y=33) to the top (y=5)
    assert 'points="0.0,33.0 100.0,19.0 300.0,5.0"' in svg
    assert '<line stroke="#d62728"' in svg and 'x1="200.0"' in svg


def test_status_table_read_back(tmp_path: Path) -> None:
    file = tmp_path / "c.toml"
    file.write_text(
        BASE + "[status]\nsamples = 5\np95_above = { local = '2s', '*' = '30s' }\n"
        "degraded_below = 0.95\ndown_below = 0.6\ndown_after = 2\nstale_intervals = 2.5\n"
        "stale_after = '2h'\n"
    )
    rules = config.load(file).status
    assert rules == StatusRules(5, {"local": 2.0, "*": 30.0}, 0.95, 0.6, 2, 2.5, 7200.0)
    file.write_text(BASE + "[status]\np95_above = '1.5s'\n")
    assert config.load(file).status.p95_limit("anything") == 1.5


@pytest.mark.parametrize(
    ("text", "key"),
    [
        ("[status]\nsamples = 0\n", "status.samples"),
        ("[status]\nsample = 5\n", "status.sample"),
        ("[status]\np95_above = { docker = '2s' }\n", "status.p95_above.docker"),
        ("[status]\np95_above = '-1s'\n", "status.p95_above"),
        ("[status]\ndegraded_below = 1.5\n", "status.degraded_below"),
        ("[status]\ndown_below = 0.95\ndegraded_below = 0.9\n", "status.down_below"),
        ("[status]\nsamples = 2\ndown_after = 3\n", "status.down_after"),
        ("[status]\nstale_after = 'soon'\n", "status.stale_after"),
    ],
)
def test_each_status_mistake_names_its_key(tmp_path: Path, text: str, key: str) -> None:
    file = tmp_path / "bad.toml"
    file.write_text(BASE + text)
    with pytest.raises(config.ConfigError) as info:
        config.load(file)
    assert any(key in p for p in info.value.problems), info.value.problems


#: What the card of `_own_errors_only`'s series says.
UNKNOWN_REASON = (
    "the last 10 rollouts never reached the substrate: harness_error ×8, engine_error ×2; "
    "the last that did 3.0 h ago (limit 60 min)"
)


def _own_errors_only(path: Path) -> Path:
    """docker answered five times three hours ago; since then every rollout was rtax's own
    error (2 engine, 8 harness, a minute apart, the last a minute ago)."""
    now = datetime.now(UTC)
    with Store(path) as store:
        for i in range(5):
            store.save_rollout(
                make_record(f"ok{i}", substrate="docker", kind="docker",
                            started_at=(now - timedelta(hours=3, minutes=i)).isoformat())
            )  # fmt: skip
        for i, cls in enumerate(["engine_error"] * 2 + ["harness_error"] * 8):
            store.save_rollout(
                make_record(f"own{i}", substrate="docker", kind="docker", status="failed",
                            error_class=cls, time_to_first_command_s=None,
                            started_at=(now - timedelta(minutes=10 - i)).isoformat())
            )  # fmt: skip
    return path


def test_a_series_failing_only_for_rtaxs_own_reasons_is_an_unknown_card(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Probed a minute ago, so not stale; but the newest rollout that reached the substrate
    is older than the hour a series no plan schedules may go without one: unknown, grey,
    with the reason, never up."""
    monkeypatch.setenv("RTAX_CONFIG", str(tmp_path / "none.toml"))  # the default [status]
    db = _own_errors_only(tmp_path / "u.db")
    data.st.cache_data.clear()
    (card,) = data.status_board.__wrapped__(str(db), (None, (), (), (), ()))
    assert card.state == "unknown"
    assert card.reasons == (UNKNOWN_REASON,)
    assert board.COLORS["unknown"] == "gray"
    assert board.summary([card]) == "1 series: :gray[1 unknown]"
    assert (card.runs_24h, card.own_24h) == (5, 10)
    assert "success 100.0% of 5 (24 h); 10 failed for rtax's own reasons" in board.figures(card)
    assert [v for _, v in card.spark] == [0.06] * 5  # its own errors are not the substrate's


def test_the_board_puts_the_worst_first() -> None:
    """down, degraded, unknown, stale, up: the substrate's trouble first, then rtax's (unknown:
    probed but not measured; stale: no longer probed), whatever the labels' order."""
    outcomes = {"a-up": "o" * 10, "b-stale": "o" * 10, "c-unknown": "h" * 10,
                "d-degraded": "o" * 8 + "xx", "e-down": "xxx"}  # fmt: skip
    seen = pd.DataFrame(
        [
            {"substrate": name, "mode": "exec", "fidelity": "real", "launch_type": "cold",
             "vantage": "local", "tier": "T0", "steps": 0,
             "last": (NOW - timedelta(hours=2 if name == "b-stale" else 0, minutes=1)).isoformat()}
            for name in outcomes
        ]
    )  # fmt: skip
    found = status.cards(
        seen, pd.DataFrame(), lambda row: _runs(outcomes[row["substrate"]]), [], [], DEFAULT, NOW
    )
    assert [(c.label, c.state) for c in found] == [
        ("e-down · T0", "down"),
        ("d-degraded · T0", "degraded"),
        ("c-unknown · T0", "unknown"),
        ("b-stale · T0", "stale"),
        ("a-up · T0", "up"),
    ]


def test_the_overview_shows_the_unknown_card_with_its_reason(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The same series on the Overview page, under AppTest: a grey "unknown" badge and why."""
    monkeypatch.setenv("RTAX_CONFIG", str(tmp_path / "none.toml"))
    monkeypatch.setenv("RTAX_DB", str(_own_errors_only(tmp_path / "u.db")))
    data.st.cache_data.clear()
    at = AppTest.from_file(str(ROOT / "app.py"), default_timeout=DEADLINE_S).run()
    assert not at.exception, [e.value for e in at.exception]
    markdown = [m.value for m in at.markdown]
    assert "**docker · T0**  \n:gray[● **unknown**]" in markdown
    assert "1 series: :gray[1 unknown]" in markdown
    assert UNKNOWN_REASON in [c.value for c in at.caption]
    assert not any("● **up**" in m for m in markdown)
