"""The incident lifecycle through the scheduler's detection pass on a real SQLite file
(rtax.service.detection, rtax.analysis.incidents, rtax.store.incidents): a permanent shift
accepted as the new baseline and a further shift opening a new incident that alerts; a
re-breach that opens when it happens; acknowledging and resolving by hand; maintenance windows
that keep and mark incidents and send nothing; the vantage quorum; SLO burn-rate incidents;
and the replay the evaluation runs deciding exactly what the store-backed pass decides."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import numpy as np
import pytest

from rtax.analysis import replay, slo
from rtax.analysis.maintenance import Window
from rtax.analysis.rules import DEFAULT_RULES, Alerts, Detection, Rule
from rtax.core.series import Selector
from rtax.service import alerts, detection
from rtax.store.database import Store
from tests.factories import make_record
from webhook import Receiver

T0 = datetime(2026, 1, 1, tzinfo=UTC)
CHANGE = Rule("ttfc-change", "time_to_first_command", "change_above", 1.3)
DETECTION = Detection(baseline_samples=40)


def _at(i: int) -> datetime:
    return T0 + timedelta(minutes=5 * i)


def _store_run(store: Store, i: int, ttfc: float, *, ok: bool = True, **run) -> datetime:
    start = _at(i)
    store.save_rollout(
        make_record(
            f"r{i:05d}-{run.get('vantage', 'local')}",
            started_at=detection.stamp(start),
            time_to_first_command_s=ttfc if ok else None,
            episode_s=None,
            status="ok" if ok else "failed",
            error_class=None if ok else "exec_error",
            **run,
        )
    )
    return start


def _noise(seed: int, n: int) -> np.ndarray:
    return np.exp(np.random.default_rng(seed).normal(0.0, 0.1, n))


def _feed(store: Store, values, alerts_: Alerts, start: int = 0, **kw) -> list[detection.Report]:
    """Store rollouts one by one (5 minutes apart), a detection pass after each."""
    reports = []
    for i, value in enumerate(values, start=start):
        now = _store_run(store, i, float(value))
        reports.append(detection.check(store, DETECTION, alerts_, now, delivering=True, **kw))
    return reports


def test_a_permanent_shift_is_accepted_as_the_new_baseline_and_a_second_one_alerts(
    tmp_path: Path,
) -> None:
    """1 s for 100 rollouts, then 2 s for good, then 4 s. The first shift opens one incident;
    40 samples (baseline_samples) at 2 s without returning resolve it as the new baseline, and
    detection goes on from it, so the shift to 4 s opens a second incident, whose opened alert
    goes out, as does the first's resolved one, saying it was accepted."""
    settings = Alerts(webhook="http://127.0.0.1:9/hook", rules=(CHANGE,))
    levels = np.r_[np.ones(100), np.full(80, 2.0), np.full(30, 4.0)] * _noise(1, 210)
    with Store(tmp_path / "rtax.db") as store:
        reports = _feed(store, levels, settings)
        opened = [(i, o) for i, r in enumerate(reports) for o in r.opened]
        resolved = [(i, o) for i, r in enumerate(reports) for o in r.resolved]
        assert len(opened) == 2, opened
        (first_at, first), (second_at, second) = opened
        assert 100 <= first_at < 110 and 180 <= second_at < 190
        assert resolved == [(resolved[0][0], first)]
        row = store.incidents.get(first)
        assert row["resolution"] == "baseline" and row["resolved_at"]
        assert "accepted as the new baseline after 40 samples" in row["detail"]
        assert row["after_p50"] == pytest.approx(2.0, rel=0.15)
        new = store.incidents.get(second)
        assert new["state"] == "open" and new["alert_open"] == "pending"
        assert new["before_p50"] == pytest.approx(2.0, rel=0.15)  # measured from the new level
        assert new["after_p50"] == pytest.approx(4.0, rel=0.15)
        receiver = Receiver()
        try:
            notifier = alerts.Notifier(store.path, settings, receiver.url)
            sent = [notifier.deliver_due(store) for _ in range(3)]  # a resolved alert waits
            assert sum(sent) == 3  # for its opened one: a pass each
        finally:
            receiver.close()
    events = {(b["event"], b["incident"]["id"]): b["text"] for b in receiver.bodies}
    assert set(events) == {("opened", first), ("resolved", first), ("opened", second)}
    assert events[("resolved", first)].startswith(
        "rtax incident resolved (accepted as the new baseline): local T0 S=0 exec real"
    )


def test_a_p95_rule_breaching_again_opens_at_the_sample_that_breached(store: Store) -> None:
    """A p95 rule over 5 samples: a breach, a recovery, then one slow sample breaches again.
    The second incident opens at that sample, not when the first breach's samples have left
    the window."""
    rule = Rule("slow", "time_to_first_command", "p95_above", 1.5, samples=5)
    settings = Alerts(rules=(rule,))
    values = [1.0] * 5 + [3.0] + [1.0] * 5 + [3.0]
    reports = _feed(store, values, settings)
    opened = [i for i, r in enumerate(reports) for _ in r.opened]
    assert opened == [5, 11]
    (newest,) = store.incidents.open()
    assert newest["start"] == detection.stamp(_at(11))


def test_acknowledge_and_resolve_by_hand(db_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from rtax import cli

    rule = Rule("slow", "time_to_first_command", "p95_above", 1.5, samples=1)
    with Store(db_path) as store:
        _feed(store, [3.0], Alerts(webhook="http://127.0.0.1:9/hook", rules=(rule,)))
        (incident,) = store.incidents.open()
    db = ["--db", str(db_path)]
    assert cli.main(["incidents", "ack", str(incident["id"]), *db, "--note", "alice"]) == 0
    assert "acknowledged" in capsys.readouterr().out
    assert cli.main(["incidents", *db, "resolve", str(incident["id"]), "--note", "redeployed"]) == 0
    out = capsys.readouterr().out
    assert "resolved: manual" in out and "[note: redeployed]" in out and "[ack: alice]" in out
    with Store(db_path) as store:
        row = store.incidents.get(incident["id"])
        assert row["acknowledged_note"] == "alice" and row["note"] == "redeployed"
        assert row["acknowledged_at"] <= row["resolved_at"]
        assert row["alert_resolved"] == "pending"  # its opened alert was due: so is this one
    assert cli.main(["incidents", "ack", str(incident["id"]), *db]) == 2
    assert "already resolved" in capsys.readouterr().err
    assert cli.main(["incidents", "resolve", "999", *db, "--note", "x"]) == 2
    assert "no incident 999" in capsys.readouterr().err
    with pytest.raises(SystemExit):  # --note is required: argparse says so
        cli.main(["incidents", "resolve", str(incident["id"]), *db])


def test_an_incident_inside_a_maintenance_window_is_kept_marked_and_silent(store: Store) -> None:
    """A window from the configuration covering the series, and one added to the store for
    another: the incident that opens inside the first is kept, marked with it and silenced
    (its resolved alert too); the same breach outside any window alerts."""
    rule = Rule("slow", "time_to_first_command", "p95_above", 1.5, samples=1)
    settings = Alerts(webhook="http://127.0.0.1:9/hook", rules=(rule,))
    planned = Window(Selector(substrate=("local",)), _at(0), _at(3), "image rebuild")
    store.maintenance.add(
        Selector(substrate=("docker",)), detection.stamp(_at(0)), detection.stamp(_at(50)),
        "not this series", detection.stamp(T0),
    )  # fmt: skip
    _feed(store, [3.0, 1.0], settings, maintenance=[planned])
    _feed(store, [1.0, 3.0], settings, start=4, maintenance=[planned])
    quiet, loud = (store.incidents.get(i) for i in sorted(store.incidents.read()["id"]))
    assert quiet["maintenance"] == planned.describe() and "image rebuild" in quiet["maintenance"]
    assert (quiet["alert_open"], quiet["alert_resolved"]) == ("silenced", "silenced")
    assert loud["maintenance"] is None and loud["alert_open"] == "pending"
    assert [i["id"] for i in store.incidents.due_alerts(detection.stamp(_at(9)))] == [loud["id"]]


def test_an_incident_says_from_how_many_vantages_it_is_seen(store: Store) -> None:
    """One substrate probed from three vantages: eu and us slow, ap not. Each open incident
    says 2 of 3 and that the quorum of 2 is met; with ap slow alone it would not be."""
    rule = Rule("slow", "time_to_first_command", "p95_above", 1.5, samples=1)
    settings = Alerts(rules=(rule,), quorum=2)
    for vantage, value in (("eu", 3.0), ("us", 3.0), ("ap", 1.0)):
        _store_run(store, 0, value, vantage=vantage)
    detection.check(store, DETECTION, settings, _at(0), delivering=False)
    rows = store.incidents.open()
    assert sorted(r["vantage"] for r in rows) == ["eu", "us"]
    assert {r["vantages"] for r in rows} == {"2 of 3: eu, us; quorum 2 met"}
    body = alerts.body(rows[0], "opened")
    assert body["text"].endswith("[seen from 2 of 3: eu, us; quorum 2 met]")
    detection.check(store, DETECTION, Alerts(rules=(rule,), quorum=3), _at(0), delivering=False)
    assert {r["vantages"] for r in store.incidents.open()} == {"2 of 3: eu, us; quorum 3 not met"}


def test_an_objective_burning_its_budget_opens_incidents_that_resolve(store: Store) -> None:
    """A 99 % objective of time to first command <= 1 s on local, with the default pairs
    (1 h / 5 min at 14.4x, 6 h / 30 min at 6x), one probe every 5 minutes; a window [now − w,
    now] holds its both ends, so an hour holds 13 rollouts and 30 minutes 7. After a clean
    hour, the first slow rollout burns 1 / 1 % = 100x in its 5-minute window and 1/13 / 1 % =
    7.7x over the hour, and 1/7 / 1 % = 14.3x over 30 minutes: the 6x pair fires, the 14.4x
    one not yet; the second slow one makes the hour 2/13 = 15.4x: the 14.4x pair fires too.
    Three fast ones after the third slow one: the 5-minute window is clean, so the 14.4x
    incident resolves as recovered, while the 30-minute window still holds the three slow
    ones (3/7, 43x) and the 6x one stays open."""
    objective = slo.Objective(
        name="start", selector=Selector(substrate=("local",)), metric="time_to_first_command",
        target=0.99, threshold_s=1.0,
    )  # fmt: skip
    settings = Alerts(rules=())
    values = [0.5] * 12 + [2.0] * 3 + [0.5] * 3
    reports = _feed(store, values, settings, objectives=[objective])
    opened = {store.incidents.get(o)["rule"]: i for i, r in enumerate(reports) for o in r.opened}
    assert opened == {"start burn 6x 6h/30m": 12, "start burn 14.4x 1h/5m": 13}
    rows = {r["rule"]: r for r in store.incidents.read().to_dict("records")}
    fast = rows["start burn 14.4x 1h/5m"]
    assert (fast["state"], fast["resolution"], fast["detector"]) == (
        "resolved",
        "recovered",
        "burn_rate",
    )
    assert rows["start burn 6x 6h/30m"]["state"] == "open"


def test_the_replay_decides_what_the_store_backed_pass_decides(tmp_path: Path) -> None:
    """The evaluation's replay (rtax.analysis.replay) and the scheduler's pass over a real
    store, fed the same series (a 1.5x step, a return, a 2x step, a success drop), open and
    resolve the same incidents at the same samples with the same resolutions."""
    rng = np.random.default_rng(7)
    latency = np.exp(rng.normal(0.0, 0.12, 400))
    latency[150:230] *= 1.5
    latency[300:] *= 2.0
    ok = np.ones(400, dtype=bool)
    ok[260:280] = rng.random(20) < 0.5
    rules = (*DEFAULT_RULES, Rule("failing", "success_rate", "success_below", 0.5))
    settings = Alerts(rules=rules)
    recording = replay.Recording.synthetic(latency, ok, interval_s=300.0)
    expected = replay.replay(recording, rules, DETECTION)
    with Store(tmp_path / "rtax.db") as store:
        seen: dict[int, list] = {}
        for i in range(400):
            now = datetime.fromisoformat(str(recording.started_at[i]))
            store.save_rollout(
                make_record(
                    f"r{i:05d}",
                    started_at=str(recording.started_at[i]),
                    time_to_first_command_s=float(latency[i]) if ok[i] else None,
                    episode_s=None,
                    status="ok" if ok[i] else "failed",
                    error_class=None if ok[i] else "exec_error",
                )
            )
            report = detection.check(store, DETECTION, settings, now, delivering=False)
            for incident_id in report.opened:
                seen[incident_id] = [i, None, None]
            for incident_id in report.resolved:
                seen[incident_id][1] = i
        for incident_id, row in seen.items():
            row[2] = store.incidents.get(incident_id)["resolution"]
    found = [tuple(v) for _, v in sorted(seen.items())]
    assert len(expected) >= 3
    assert found == [(e.opened_at, e.resolved_at, e.resolution) for e in expected]


def test_a_v11_file_gains_the_lifecycle_and_its_incidents_their_seven_parts(
    tmp_path: Path,
) -> None:
    """Schema 12 reads an incident's launch type and vantage back from its key (as
    Series.key wrote them), says why each resolved one was resolved, and adds the
    maintenance table; the incidents' columns are then exactly today's."""
    import sqlite_utils

    from rtax.store import INCIDENT_COLUMNS, migrations

    path = tmp_path / "v11.db"
    db = sqlite_utils.Database(path)
    for version, migration in migrations.MIGRATIONS:
        if version <= 11:
            migration(db)
    db.execute("PRAGMA user_version = 11")
    common = {
        "tier": "T0", "steps": 0, "mode": "exec", "fidelity": "real", "metric": "m",
        "detector": "binseg", "start": "2026-01-01", "opened_at": "2026-01-01",
        "alert_open": "off",
    }  # fmt: skip
    for key, state, detail in (
        ("docker T0 S=0 exec real warm @ eu", "open", "slow"),
        ("local T0 S=0 exec real", "resolved", "slow"),
        ("local T0 S=0 exec real @ us", "resolved", "its rule was removed"),
    ):
        db["incidents"].insert(
            {
                **common,
                "series": key,
                "substrate": key.split()[0],
                "rule": key,
                "state": state,
                "detail": detail,
            }
        )
    db.conn.commit()
    db.conn.close()
    with Store(path) as store:
        assert store.version == migrations.SCHEMA_VERSION
        rows = store.incidents.read().sort_values("id").to_dict("records")
        assert [(r["launch_type"], r["vantage"]) for r in rows] == [
            ("warm", "eu"),
            ("cold", "local"),
            ("cold", "us"),
        ]
        assert [r["resolution"] for r in rows][1:] == ["recovered", "rule_removed"]
        assert rows[0]["resolution"] != rows[0]["resolution"]  # open: none (NaN)
        assert set(INCIDENT_COLUMNS) | {"id"} == set(store.db["incidents"].columns_dict)
        assert store.maintenance.read() == []
