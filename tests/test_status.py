"""The status board's rules (rtax.analysis.status) and the ``[status]`` table: each state from runs
whose verdict is worked out by hand, the stale limit from the plans, the card's 24-hour
figures from the store against values computed by hand, and every config mistake named."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from types import SimpleNamespace

import pandas as pd
import pytest

from factories import make_record
from rtax.analysis import status
from rtax.analysis.status import StatusRules, judge
from rtax.core.series import Series
from rtax.settings import config
from rtax.store.database import Store

NOW = datetime(2026, 6, 1, 12, 0, tzinfo=UTC)
BASE = "[[substrates]]\nname = 'local'\nkind = 'local'\n"


def _runs(outcomes: str, ttfc: list[float] | None = None) -> pd.DataFrame:
    """Runs newest last: ``o`` ok, ``x`` a substrate failure, ``h`` rtax's own failure."""
    rows = []
    for i, c in enumerate(outcomes):
        rows.append(
            {
                "started_at": (NOW - timedelta(minutes=len(outcomes) - i)).isoformat(),
                "status": "ok" if c == "o" else "failed",
                "error_class": {"o": None, "x": "exec_error", "h": "harness_error"}[c],
                "time_to_first_command_s": (ttfc[i] if ttfc else 0.2) if c == "o" else None,
            }
        )
    return pd.DataFrame(rows)


DEFAULT = StatusRules()


def _judge(runs: pd.DataFrame, rules: StatusRules = DEFAULT, **kw):
    args = {"age_s": 30.0, "stale_limit_s": 600.0, "open_incidents": 0, "substrate": "docker"}
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
        from rtax.dashboard import data

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
