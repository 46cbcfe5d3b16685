"""Webhook alerts (rtax.service.alerts) against a real HTTP receiver on 127.0.0.1: one alert per
incident event, a receiver that is down (refused, then 500s) gets it later, a restart still
delivers, the back-off follows the injected clock, the body is Slack-shaped and scrubbed, and a
hanging receiver never holds up storing rollouts."""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from polling import wait_for
from rtax.analysis.rules import Alerts, Detection, Rule
from rtax.core import redaction
from rtax.service import alerts, detection
from rtax.store.database import Store
from tests.factories import make_record
from webhook import Receiver

T0 = datetime(2026, 1, 1, tzinfo=UTC)
SLOW = Rule("slow", "time_to_first_command", "p95_above", 2.0, samples=1)


@pytest.fixture
def receiver() -> Iterator[Receiver]:
    r = Receiver()
    yield r
    r.close()


def _free_port() -> int:
    """A port nothing listens on (yet): posting to it is refused."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _slow(store: Store, i: int, ttfc: float, settings: Alerts) -> detection.Report:
    """Store rollout `i` (a minute apart) and run a detection pass at its start."""
    start = T0 + timedelta(minutes=i)
    store.save_rollout(
        make_record(f"r{i}", started_at=detection.stamp(start), time_to_first_command_s=ttfc)
    )
    return detection.check(store, Detection(), settings, start, delivering=True)


class Clock:
    def __init__(self, start: datetime) -> None:
        self.t = start.timestamp()

    def __call__(self) -> float:
        return self.t


def test_one_alert_when_an_incident_opens_and_one_when_it_resolves(
    store: Store, db_path: Path, receiver: Receiver
) -> None:
    settings = Alerts(rules=(SLOW,))
    notifier = alerts.Notifier(db_path, settings, receiver.url, clock=Clock(T0))
    _slow(store, 0, 5.0, settings)
    assert notifier.deliver_due(store) == 1
    assert notifier.deliver_due(store) == 0  # sent is sent
    _slow(store, 1, 5.0, settings)  # still open: nothing new
    assert notifier.deliver_due(store) == 0
    _slow(store, 2, 1.0, settings)
    assert notifier.deliver_due(store) == 1
    assert notifier.deliver_due(store) == 0
    opened, resolved = receiver.bodies
    assert opened["event"] == "opened" and resolved["event"] == "resolved"
    assert opened["text"].startswith("rtax incident opened: local T0 S=0 exec real")
    assert "p95 5.000 s" in opened["text"]
    assert opened["incident"]["metric"] == "time_to_first_command"
    assert opened["incident"]["magnitude"] == pytest.approx(2.5)
    assert resolved["incident"]["state"] == "resolved" and resolved["incident"]["end"]
    assert opened["incident"]["id"] == resolved["incident"]["id"]


def test_a_receiver_that_is_down_gets_the_alert_when_it_comes_back(
    store: Store, db_path: Path
) -> None:
    """Connection refused, then two 500s, then 200: the notifier thread keeps the alert and
    retries it (real time, a 50 ms back-off) until the receiver takes it, once."""
    port = _free_port()
    settings = Alerts(rules=(SLOW,), backoff_s=0.05, max_backoff_s=0.2, timeout_s=2)
    notifier = alerts.Notifier(db_path, settings, f"http://127.0.0.1:{port}/hook")
    _slow(store, 0, 5.0, settings)
    notifier.start()
    try:
        notifier.wake()
        wait_for(lambda: store.incidents.open()[0]["alert_attempts"] >= 2, "two refused attempts")
        (incident,) = store.incidents.open()
        assert incident["alert_open"] == "pending"
        assert "Connection refused" in incident["alert_error"]
        receiver = Receiver(port)
        try:
            receiver.status = 500
            wait_for(lambda: receiver.requests >= 2, "two 500s")
            wait_for(lambda: store.incidents.open()[0]["alert_error"] == "HTTP 500", "a 500 kept")
            receiver.status = 200
            wait_for(lambda: receiver.bodies, "the alert delivered")
            wait_for(lambda: store.incidents.open()[0]["alert_open"] == "sent", "marked sent")
            assert len(receiver.bodies) == 1 and receiver.bodies[0]["event"] == "opened"
        finally:
            receiver.close()
    finally:
        notifier.stop()


def test_a_pending_alert_survives_a_restart(store: Store, db_path: Path) -> None:
    port = _free_port()
    settings = Alerts(rules=(SLOW,), backoff_s=0.05, max_backoff_s=0.1)
    first = alerts.Notifier(db_path, settings, f"http://127.0.0.1:{port}/hook")
    _slow(store, 0, 5.0, settings)
    first.start()
    wait_for(lambda: store.incidents.open()[0]["alert_attempts"] >= 1, "a refused attempt")
    first.stop()
    receiver = Receiver(port)
    try:
        second = alerts.Notifier(db_path, settings, receiver.url)
        second.start()  # a new scheduler: it finds the pending alert in the database
        try:
            wait_for(lambda: receiver.bodies, "the alert delivered after the restart")
        finally:
            second.stop()
        assert len(receiver.bodies) == 1
    finally:
        receiver.close()


def test_retries_back_off_on_the_injected_clock(store: Store, db_path: Path) -> None:
    """backoff 5 s, max 12 s: due again 5, 10, then 12, 12 s after each failure."""
    clock = Clock(T0)
    settings = Alerts(rules=(SLOW,), backoff_s=5, max_backoff_s=12, timeout_s=1)
    notifier = alerts.Notifier(db_path, settings, f"http://127.0.0.1:{_free_port()}/x", clock=clock)
    _slow(store, 0, 5.0, settings)
    gaps = []
    for _ in range(4):
        notifier.deliver_due(store)
        (incident,) = store.incidents.open()
        due = datetime.fromisoformat(incident["alert_next_at"]).timestamp()
        gaps.append(due - clock.t)
        clock.t = due - 0.5
        notifier.deliver_due(store)  # not yet due: no attempt
        assert store.incidents.open()[0]["alert_attempts"] == incident["alert_attempts"]
        clock.t = due
    assert gaps == [5, 10, 12, 12]


def test_a_suppressed_alert_is_never_posted(store: Store, db_path: Path, receiver) -> None:
    settings = Alerts(rules=(SLOW,), cooldown_s=3600)
    notifier = alerts.Notifier(db_path, settings, receiver.url, clock=Clock(T0))
    for i, ttfc in enumerate((5.0, 1.0, 5.0, 1.0)):  # opens, resolves, opens, resolves
        _slow(store, i, ttfc, settings)
        notifier.deliver_due(store)
    assert [b["event"] for b in receiver.bodies] == ["opened", "resolved"]
    assert store.incidents.read()["alert_open"].tolist() == ["suppressed", "sent"]


def test_secrets_are_scrubbed_from_the_body(
    store: Store, db_path: Path, receiver: Receiver, monkeypatch: pytest.MonkeyPatch
) -> None:
    secret = "hunter2-webhook-token-91c"
    monkeypatch.setenv("RTAX_TEST_HOOK", f"{receiver.url}?token={secret}")
    url = alerts.webhook_url(Alerts(webhook_env="RTAX_TEST_HOOK"))
    assert url and secret in url and secret in redaction.held()
    store.incidents.add(
        {
            "series": "local T0 S=0 exec real",
            "substrate": "local",
            "tier": "T0",
            "steps": 0,
            "mode": "exec",
            "fidelity": "real",
            "metric": "time_to_first_command",
            "rule": "slow",
            "detector": "threshold",
            "start": detection.stamp(T0),
            "opened_at": detection.stamp(T0),
            "detail": f"the API said: bad token {secret}",
            "alert_open": "pending",
        }
    )
    notifier = alerts.Notifier(db_path, Alerts(), url, clock=Clock(T0))
    assert notifier.deliver_due(store) == 1
    (sent,) = receiver.bodies
    assert secret not in json.dumps(sent)
    assert redaction.MASK in sent["text"] and redaction.MASK in sent["incident"]["detail"]


def test_a_hanging_receiver_never_holds_up_storing_and_detection(
    store: Store, db_path: Path, receiver: Receiver
) -> None:
    receiver.hold = threading.Event()
    settings = Alerts(rules=(SLOW,), timeout_s=5)
    notifier = alerts.Notifier(db_path, settings, receiver.url)
    _slow(store, 0, 5.0, settings)
    notifier.start()
    try:
        wait_for(lambda: receiver.requests == 1, "the post in flight")
        began = time.monotonic()
        for i in range(1, 6):
            _slow(store, i, 1.0, settings)  # rollouts stored, incidents resolved meanwhile
        assert time.monotonic() - began < 2.0
        assert store.runs.count() == 6
        receiver.hold.set()
        wait_for(lambda: len(receiver.bodies) == 2, "opened, then resolved")
        assert [b["event"] for b in receiver.bodies] == ["opened", "resolved"]
    finally:
        notifier.stop()
