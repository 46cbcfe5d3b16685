"""Incidents (rtax.analysis.incidents, rtax.service.detection, rtax.store.incidents) on a real
SQLite file: a slowdown opens one incident that resolves when the series returns; threshold
rules, staleness and the cool-down; an old database file gains the table."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import sqlite_utils

from rtax.analysis.rules import Alerts, Detection, Rule
from rtax.core.series import Series
from rtax.service import detection
from rtax.store import INCIDENT_COLUMNS, Store, migrations
from tests.factories import make_record

T0 = datetime(2026, 1, 1, tzinfo=UTC)
CHANGE = Rule("ttfc-change", "time_to_first_command", "change_above", 1.5)
ALERTS = Alerts(webhook="http://127.0.0.1:9/hook", rules=(CHANGE,))
DETECTION = Detection()


def _probe(store: Store, i: int, ttfc: float = 1.0, *, ok: bool = True, **run) -> datetime:
    """Rollout `i` of one series, a minute apart; returns its start."""
    start = T0 + timedelta(minutes=i)
    store.save_rollout(
        make_record(
            f"r{i:04d}",
            started_at=detection.stamp(start),
            time_to_first_command_s=ttfc if ok else None,
            episode_s=2.0 if ok else None,
            status="ok" if ok else "failed",
            error_class=None if ok else "exec_error",
            **run,
        )
    )
    return start


def _check(store: Store, now: datetime, alerts: Alerts = ALERTS, delivering: bool = True):
    return detection.check(store, DETECTION, alerts, now, delivering=delivering)


def test_a_slowdown_opens_one_incident_that_resolves_when_the_series_returns(
    store: Store,
) -> None:
    for i in range(40):
        _probe(store, i, 1.0 + 0.01 * (i % 3))
    assert _check(store, T0 + timedelta(hours=1)).opened == []
    for i in range(40, 46):
        last = _probe(store, i, 3.0 + 0.01 * (i % 3))
    report = _check(store, last)
    assert len(report.opened) == 1
    (incident,) = store.incidents.open()
    assert incident["series"] == "local T0 S=0 exec real"
    assert (incident["metric"], incident["rule"], incident["detector"]) == (
        "time_to_first_command",
        "ttfc-change",
        "binseg",
    )
    assert incident["start"] == detection.stamp(T0 + timedelta(minutes=40))
    assert incident["before_p50"] == pytest.approx(1.01, abs=0.01)
    assert incident["after_p50"] == pytest.approx(3.01, abs=0.01)
    assert incident["magnitude"] == pytest.approx(3.0, rel=0.02)
    assert incident["alert_open"] == "pending" and incident["alert_resolved"] is None
    # Further passes, and more slow samples, open nothing more.
    for i in range(46, 50):
        last = _probe(store, i, 3.0)
        assert _check(store, last).opened == []
    # Back at 1 s: the median of the newest ten is 2.0 s after five fast samples (above the
    # midpoint √(1.01 × 3.01) = 1.74 s), 1.0 s after six: the sixth resolves it.
    for i in range(50, 55):
        last = _probe(store, i, 1.0)
        assert _check(store, last).resolved == []
    last = _probe(store, 55, 1.0)
    assert _check(store, last).resolved == [incident["id"]]
    (row,) = store.incidents.read().to_dict("records")
    assert row["state"] == "resolved" and row["end"] == detection.stamp(last)
    assert row["alert_resolved"] == "pending"
    # Detection still sees the old change in its window: it is not opened again.
    for i in range(60, 65):
        last = _probe(store, i, 1.0)
        assert _check(store, last).opened == []


def test_warm_claims_beside_cold_starts_are_two_series_not_a_change(store: Store) -> None:
    """A substrate probed through a warm pool, then with the pool taken out of its entry:
    claims of a few ms, then cold starts of 1 s. As one series that is a 250x slowdown; as
    the two series they are (docs/measurement.md#warm-pools), neither changed."""
    for i in range(70):
        if i < 40:
            _probe(store, i, 0.004 + 0.0001 * (i % 3), launch_type="warm", claim_s=0.004)
        else:
            _probe(store, i, 1.0 + 0.01 * (i % 3))
    report = _check(store, T0 + timedelta(minutes=70))
    assert report.opened == [] and store.incidents.open() == []
    seen = store.runs.series_seen(detection.stamp(T0))
    assert sorted(seen["launch_type"]) == ["cold", "warm"]
    warm = seen[seen["launch_type"] == "warm"].iloc[0]
    assert Series.of(warm).key == "local T0 S=0 exec real warm"
    assert Series.of(seen[seen["launch_type"] == "cold"].iloc[0]).key == (
        "local T0 S=0 exec real"  # a cold series keeps the key it always had
    )


def test_a_new_vantage_is_a_series_of_its_own_not_a_change(store: Store) -> None:
    """eu has probed at 1 s for 40 minutes; then us (farther away: 3 s) starts probing too.
    Two vantages are two series (docs/ray.md#vantages): no change opens, and a slowdown of us
    itself is named as us's."""
    for i in range(40):
        _probe(store, i, 1.0 + 0.01 * (i % 3), vantage="eu")
    for i in range(40, 52):
        last = _probe(store, i, 3.0 + 0.01 * (i % 3), vantage="us")
    assert _check(store, last).opened == []
    for i in range(52, 58):
        last = _probe(store, i, 9.0, vantage="us")
    _check(store, last)
    (incident,) = store.incidents.open()
    assert incident["series"] == "local T0 S=0 exec real @ us"


def test_latency_of_failed_rollouts_never_opens_an_incident(store: Store) -> None:
    """Failures carry no latency (docs/measurement.md#failures): a run of failures between
    steady successes is no latency change."""
    for i in range(30):
        _probe(store, i, 1.0)
    for i in range(30, 40):
        _probe(store, i, ok=False)
    for i in range(40, 50):
        last = _probe(store, i, 1.0)
    assert _check(store, last).opened == []


def test_success_dropping_to_half_opens_a_success_incident(store: Store) -> None:
    rule = Rule("success-change", "success_rate", "change_above", 1.25)
    alerts = Alerts(rules=(rule,))
    for i in range(30):
        _probe(store, i)
    for i in range(30, 50):
        last = _probe(store, i, ok=i % 2 == 1)
    assert len(_check(store, last, alerts).opened) == 1
    (incident,) = store.incidents.open()
    assert incident["metric"] == "success_rate"
    assert incident["before_p50"] == 1.0 and incident["after_p50"] == pytest.approx(0.5)
    assert incident["magnitude"] == pytest.approx(2.0)


def test_a_p95_rule_opens_and_resolves_over_its_window(store: Store) -> None:
    rule = Rule("slow", "time_to_first_command", "p95_above", 2.0, samples=5)
    alerts = Alerts(rules=(rule,))
    for i in range(4):
        last = _probe(store, i, 5.0)
    assert _check(store, last, alerts).opened == []  # 4 < 5 samples: no verdict yet
    last = _probe(store, 4, 5.0)
    assert len(_check(store, last, alerts).opened) == 1
    (incident,) = store.incidents.open()
    assert incident["detector"] == "threshold" and incident["magnitude"] == pytest.approx(2.5)
    assert incident["start"] == detection.stamp(T0)
    for i in range(5, 9):
        last = _probe(store, i, 1.0)
        assert _check(store, last, alerts).resolved == []  # one slow sample still in the window
    last = _probe(store, 9, 1.0)
    assert _check(store, last, alerts).resolved == [incident["id"]]


def test_staleness_opens_without_probes_and_resolves_at_the_next(store: Store) -> None:
    rule = Rule("stale", "staleness", "stale_after", 3600.0)
    alerts = Alerts(rules=(rule,))
    last = _probe(store, 0)
    assert _check(store, last + timedelta(minutes=59), alerts).opened == []
    assert len(_check(store, last + timedelta(minutes=61), alerts).opened) == 1
    (incident,) = store.incidents.open()
    assert incident["start"] == detection.stamp(last + timedelta(hours=1))
    again = _probe(store, 70)
    assert _check(store, again, alerts).resolved == [incident["id"]]


def test_the_cool_down_suppresses_a_second_alert_of_the_same_key(store: Store) -> None:
    rule = Rule("slow", "time_to_first_command", "p95_above", 2.0, samples=1)
    alerts = Alerts(rules=(rule,), cooldown_s=3600)

    def flap(i: int, now: datetime) -> str:
        _probe(store, i, 5.0)
        _check(store, now, alerts)
        (incident,) = store.incidents.open()
        _probe(store, i + 1, 1.0)
        _check(store, now, alerts)
        return incident["alert_open"]

    assert flap(0, T0) == "pending"
    assert flap(2, T0 + timedelta(minutes=59)) == "suppressed"
    assert flap(4, T0 + timedelta(minutes=61)) == "pending"
    states = store.incidents.read().sort_values("id")["alert_resolved"].tolist()
    assert states == ["pending", "suppressed", "pending"]


def test_without_a_webhook_incidents_are_recorded_with_alerts_off(store: Store) -> None:
    rule = Rule("slow", "time_to_first_command", "p95_above", 2.0, samples=1)
    last = _probe(store, 0, 5.0)
    _check(store, last, Alerts(rules=(rule,)), delivering=False)
    (incident,) = store.incidents.open()
    assert incident["alert_open"] == "off"
    assert store.incidents.due_alerts(detection.stamp(last)) == []


def test_an_incident_whose_rule_is_removed_resolves(store: Store) -> None:
    rule = Rule("slow", "time_to_first_command", "p95_above", 2.0, samples=1)
    last = _probe(store, 0, 5.0)
    _check(store, last, Alerts(rules=(rule,)))
    assert len(store.incidents.open()) == 1
    assert len(_check(store, last, Alerts(rules=())).resolved) == 1
    assert store.incidents.open() == []


def test_rules_for_other_substrates_do_not_apply(store: Store) -> None:
    rule = Rule("slow", "time_to_first_command", "p95_above", 2.0, 1, ("docker",))
    last = _probe(store, 0, 5.0)
    assert _check(store, last, Alerts(rules=(rule,))).opened == []


def test_v6_file_gains_the_incidents_table_and_keeps_its_runs(db_path: Path) -> None:
    db = sqlite_utils.Database(db_path)
    for version, migration in migrations.MIGRATIONS:
        if version <= 6:
            migration(db)
    db.execute("PRAGMA user_version = 6")
    db["runs"].insert({"run_id": "old", "substrate": "local", "tier": "T0", "mode": "exec"})
    db.conn.commit()
    db.conn.close()
    with Store(db_path) as store:
        assert store.version == migrations.SCHEMA_VERSION >= 7
        assert store.runs.read()["run_id"].tolist() == ["old"]
        assert store.incidents.open() == []
        columns = set(store.db["incidents"].columns_dict)
        assert set(INCIDENT_COLUMNS) | {"id"} == columns


def test_a_failing_pass_is_logged_and_the_next_one_runs(
    db_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """`detection.run` (the scheduler's job): a database that cannot be opened is a log line,
    never an exception out of the job; the next pass works."""
    import logging

    from rtax.settings.config import parse
    from rtax.store.database import StoreError

    config = parse({"database": str(db_path)}, base=db_path.parent)

    def broken() -> Store:
        raise StoreError("database is locked")

    log = logging.getLogger("test.monitor")
    with caplog.at_level(logging.ERROR, logger="test.monitor"):
        assert detection.run(broken, config, None, log) is None
    assert "detection failed" in caplog.text
    report = detection.run(lambda: Store(db_path), config, None, log)
    assert report is not None and report.opened == []


def test_rtax_incidents_lists_open_ones_and_with_all_resolved_ones(
    db_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from rtax import cli

    rule = Rule("slow", "time_to_first_command", "p95_above", 2.0, samples=1)
    alerts = Alerts(rules=(rule,))
    with Store(db_path) as store:
        assert cli.main(["incidents", "--db", str(db_path)]) == 0
        assert capsys.readouterr().out.strip() == "no incidents"
        _check(store, _probe(store, 0, 5.0), alerts)  # opens
        _check(store, _probe(store, 1, 1.0), alerts)  # resolves
        _check(store, _probe(store, 2, 4.0), alerts)  # opens again
    assert cli.main(["incidents", "--db", str(db_path)]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert len(lines) == 2 and " open " in lines[1]
    assert "local T0 S=0 exec real / time_to_first_command (slow) x2.00" in lines[1]
    assert cli.main(["incidents", "--db", str(db_path), "--all"]) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    assert [line.split()[1:3] for line in lines[1:]] == [
        ["open", "2026-01-01T00:02:00"],
        ["resolved:", "recovered"],
    ]
    assert "[alert pending]" in lines[2]


def test_old_rows_without_a_fidelity_are_no_series_and_break_no_pass(store: Store) -> None:
    """Rows of old files may lack a fidelity (NULL): they belong to no series; a pass
    skips them rather than failing on the incidents table's NOT NULL."""
    rule = Rule("slow", "time_to_first_command", "p95_above", 2.0, samples=1)
    _probe(store, 0, 5.0, fidelity=None)
    last = _probe(store, 1, 5.0, substrate="other")
    report = _check(store, last, Alerts(rules=(rule,)))
    assert [i["substrate"] for i in store.incidents.open()] == ["other"]
    assert len(report.opened) == 1


def test_one_failing_series_does_not_stop_the_others(
    store: Store, caplog: pytest.LogCaptureFixture
) -> None:
    """A row whose start is not a time (a damaged file) breaks its own series' staleness
    check; the pass says so and still looks at the other series."""
    rule = Rule("stale", "staleness", "stale_after", 60.0)
    store.save_rollout(make_record("bad", substrate="broken"))
    # damaged after it was written: rtax itself never saves such a start
    store.db.execute("UPDATE runs SET started_at = 'not a time' WHERE run_id = 'bad'")
    last = _probe(store, 0, substrate="fine")
    report = _check(store, last + timedelta(hours=1), Alerts(rules=(rule,)))
    assert len(report.opened) == 1
    assert [i["substrate"] for i in store.incidents.open()] == ["fine"]
    assert "detection on broken T0 S=0 exec real failed" in caplog.text
