"""Webhook delivery of incident alerts: a thread of its own, retried with back-off, kept.

Why this shape (docs/alerts.md#delivery):

- The outbox is the incidents table (`rtax.store.incidents`): an alert is pending there from
  the transaction that opened (or resolved) its incident until a receiver answered 2xx, so a
  receiver that is down, or a restart of the scheduler, delays it and never loses it.
- Its own thread and its own database connection, with a bounded timeout per request: a slow
  or dead receiver never holds a probe slot nor a rollout.
- A failed attempt is due again after `backoff` × 2^(attempts - 1), at most `max_backoff`; it
  is retried for as long as the incident exists. Alerts go out oldest first, and an incident's
  resolved alert after its opened one.
- The body is JSON, Slack-compatible (a ``text`` line) with the incident's fields beside it,
  scrubbed of every secret rtax holds (`rtax.core.redaction`), the webhook URL included.
"""

from __future__ import annotations

import json
import logging
import math
import os
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from rtax.analysis.incidents import stamp
from rtax.analysis.rules import Alerts
from rtax.core import redaction
from rtax.store import INCIDENT_COLUMNS, Store

log = logging.getLogger(__name__)

#: The incident fields an alert carries besides its text: its id and what the incident says
#: (`rtax.store.INCIDENT_COLUMNS`), not when it was written nor its alerts' delivery state.
FIELDS: tuple[str, ...] = (
    "id",
    *(c for c in INCIDENT_COLUMNS if c != "opened_at" and not c.startswith("alert_")),
)
#: The longest the thread waits before looking at the outbox again (new alerts wake it).
IDLE_S = 30.0


def webhook_url(settings: Alerts, environ: dict[str, str] | None = None) -> str | None:
    """The webhook to post to: ``webhook``, or the variable ``webhook_env`` names; None when
    neither is set. Held as a secret from then on (`_secret_parts`)."""
    value = settings.webhook
    if not value and settings.webhook_env:
        value = (os.environ if environ is None else environ).get(settings.webhook_env)
    if value:
        redaction.register(*_secret_parts(value))
    return value or None


def start(database: str | Path, settings: Alerts) -> Notifier | None:
    """A started `Notifier` for the configured webhook (None: none configured); the alerts an
    earlier run left pending go out first."""
    url = webhook_url(settings)
    if url is None:
        return None
    notifier = Notifier(database, settings, url)
    notifier.start()
    return notifier


def _secret_parts(url: str) -> list[str]:
    """What of a webhook URL is a credential: all of it, its path and query (a Slack URL's
    token is its path), and each long path segment or query value on its own."""
    parts = urllib.parse.urlsplit(url)
    rest = parts.path + (f"?{parts.query}" if parts.query else "")
    pieces = [url, rest if len(rest) >= 8 else ""]
    pieces += [p for p in parts.path.split("/") if len(p) >= 16]
    pieces += [v for _, v in urllib.parse.parse_qsl(parts.query) if len(v) >= 8]
    return pieces


#: How a resolved alert says why (the incident's ``resolution``).
WHY = {
    "recovered": "recovered",
    "baseline": "accepted as the new baseline",
    "manual": "resolved by hand",
    "rule_removed": "its rule was removed",
}


def body(incident: dict[str, Any], event: str) -> dict[str, Any]:
    """The JSON an alert posts: ``text`` for Slack, then ``event`` and the incident's fields,
    every string scrubbed. A resolved alert says why; both say from how many vantages it is
    seen where more than one probes the substrate."""
    verb = "opened"
    if event == "resolved":
        why = WHY.get(str(incident.get("resolution")), "")
        verb = f"resolved ({why})" if why else "resolved"
    text = f"rtax incident {verb}: {incident['series']} {incident['metric']} ({incident['rule']})"
    if incident.get("detail"):
        text += f": {incident['detail']}"
    if incident.get("note") and event == "resolved":
        text += f" [note: {incident['note']}]"
    if incident.get("vantages"):
        text += f" [seen from {incident['vantages']}]"
    fields = {k: _plain(incident.get(k)) for k in FIELDS}
    return redaction.scrub_value(
        {"text": text, "event": event, "incident": fields}, redaction.held()
    )


def _plain(value: Any) -> Any:
    """A value JSON can carry: NaN and infinities (no number) become null."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


class Notifier:
    """Posts the pending alerts of one database to `url`, on its own thread."""

    def __init__(
        self,
        database: str | Path,
        settings: Alerts,
        url: str,
        *,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.database = Path(database)
        self.settings = settings
        self.url = url
        self.clock = clock
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def now(self) -> datetime:
        return datetime.fromtimestamp(self.clock(), UTC)

    def start(self) -> None:
        self._thread = threading.Thread(target=self._loop, name="rtax-alerts", daemon=True)
        self._thread.start()

    def wake(self) -> None:
        """Look at the outbox now (a pass opened or resolved incidents)."""
        self._wake.set()

    def stop(self, timeout_s: float | None = None) -> None:
        """Stop after the request in flight (bounded by the timeout); pending alerts stay."""
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(self.settings.timeout_s + 1 if timeout_s is None else timeout_s)
            self._thread = None

    def _loop(self) -> None:
        while not self._stop.is_set():
            wait = IDLE_S
            try:
                with Store(self.database) as store:
                    self.deliver_due(store)
                    wait = self._until_next(store)
            except Exception:  # the database or a bug: said, and tried again later
                log.exception("alert delivery failed; retrying in %g s", IDLE_S)
            self._wake.wait(wait)
            self._wake.clear()

    def _until_next(self, store: Store) -> float:
        due = store.incidents.next_alert_at()
        if due is None:
            return IDLE_S
        if due == "":
            return 0.0
        left = (datetime.fromisoformat(due) - self.now()).total_seconds()
        return min(max(left, 0.0), IDLE_S)

    def deliver_due(self, store: Store) -> int:
        """One pass: post every alert due now; return how many were delivered."""
        delivered = 0
        for incident in store.incidents.due_alerts(stamp(self.now())):
            if self._stop.is_set():
                break
            event = incident["event"]
            error = self._post(body(incident, event))
            if error is None:
                store.incidents.alert_sent(incident["id"], event, stamp(self.now()))
                delivered += 1
                log.info("alert %s sent: incident %s", event, incident["id"])
                continue
            attempts = int(incident["alert_attempts"]) + 1
            delay = min(self.settings.backoff_s * 2 ** (attempts - 1), self.settings.max_backoff_s)
            next_at = stamp(self.now() + timedelta(seconds=delay))
            store.incidents.alert_failed(incident["id"], attempts, next_at, error)
            log.warning(
                "alert %s of incident %s not delivered (attempt %d: %s); retrying in %g s",
                event,
                incident["id"],
                attempts,
                error,
                delay,
            )
        return delivered

    def _post(self, payload: dict[str, Any]) -> str | None:
        """POST `payload`; None when the receiver took it (2xx), else why not (scrubbed)."""
        data = json.dumps(payload, allow_nan=False).encode()
        request = urllib.request.Request(
            self.url, data=data, headers={"Content-Type": "application/json"}, method="POST"
        )
        try:
            with urllib.request.urlopen(request, timeout=self.settings.timeout_s) as response:
                response.read(65536)
                return None
        except urllib.error.HTTPError as exc:
            return f"HTTP {exc.code}"
        except (OSError, ValueError) as exc:
            return redaction.scrub(f"{type(exc).__name__}: {exc}")
