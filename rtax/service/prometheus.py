"""The scheduler's Prometheus metrics: what it stored, as histograms, counters and gauges.

Why this shape (docs/metrics.md):

- Fed by records as they are written (the spool's ``on_saved``: a direct write and a spooled
  record replayed later alike), so the metrics say what the database holds, never what was
  merely attempted.
- Failed rollouts never enter a latency histogram (docs/measurement.md#failures): they are
  counted apart by error class, and rtax's own ``harness_error`` under a status of its own, so
  ``status="failed"`` is the substrates' failures only.
- A few bounded labels per series (substrate, tier, steps, mode, fidelity, vantage, launch_type),
  never a run id. ``launch_type`` follows kubernetes-sigs/agent-sandbox's startup histograms
  (warm or cold): a rollout that claimed from a warm pool is warm, every other one cold.
- A registry of its own (not prometheus_client's global one), so each scheduler and each test
  has its own numbers.
- The latency histograms' buckets are fine enough for ``histogram_quantile`` to answer a p95
  within 10 % (`LATENCY_BUCKETS`); the phase histogram, six times as many series, keeps
  coarse ones (`PHASE_BUCKETS`).
- Each objective's SLI is counted per series (``rtax_slo_events_total``,
  ``rtax_slo_good_total``, by `rtax.analysis.slo.event`, the rule the budgets use), so the same
  objectives can be written as Prometheus rules (docs/prometheus/slo-rules.yml).
- Counters and histograms start at zero with the process (Prometheus's ``rate`` handles the
  reset); the last-probe gauges are seeded from the database's recent history on start, so a
  restart does not make every series look fresh or never probed.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from datetime import UTC, datetime, timedelta
from typing import Any

from rtax.analysis import slo
from rtax.analysis.slo import Objective
from rtax.core.checks import finite
from rtax.core.failures import HARNESS_ERROR, OWN_ERRORS
from rtax.core.record import PHASES, RolloutRecord
from rtax.core.series import DIMENSIONS, Series
from rtax.settings import MetricsSettings
from rtax.store.database import Store

#: The labels of one series; every metric carries them, in this order.
SERIES_LABELS: tuple[str, ...] = DIMENSIONS
#: Buckets per octave of the latency histograms: each bucket spans a ratio of 2^(1/8) = 1.0905,
#: so a quantile interpolated inside one is within 9.05 % of any value in it.
PER_OCTAVE = 8
#: Latency buckets (s) of time to first command and episode: 1 ms to the first boundary past
#: 1 h (3,840 s), `PER_OCTAVE` per doubling (176 of them), then +Inf; six significant digits.
LATENCY_BUCKETS: tuple[float, ...] = tuple(
    float(f"{0.001 * 2 ** (k / PER_OCTAVE):.6g}")
    for k in range(math.ceil(PER_OCTAVE * math.log2(3600 / 0.001)) + 1)
)
#: Phase buckets (s): 1 ms to 10 min, about three per decade, then +Inf (docs/metrics.md says
#: why coarse: six phases per series).
PHASE_BUCKETS: tuple[float, ...] = (
    *(m * 10.0**e for e in range(-3, 2) for m in (1.0, 2.5, 5.0)),
    100.0,
    250.0,
    600.0,
)
#: How far back the last-probe gauges are seeded on start.
SEED_DAYS = 7
#: The names this module exposes (docs/metrics.md; the Grafana dashboard queries only these).
NAMES: tuple[str, ...] = (
    "rtax_time_to_first_command_seconds",
    "rtax_episode_seconds",
    "rtax_phase_seconds",
    "rtax_rollouts_total",
    "rtax_last_probe_timestamp_seconds",
    "rtax_last_probe_age_seconds",
    "rtax_slo_events_total",
    "rtax_slo_good_total",
    "rtax_slo_target_ratio",
)

LabelValues = tuple[str, ...]


def series(run: Mapping[str, Any]) -> LabelValues:
    """The label values of `run`'s series (a stored row or a record), in `SERIES_LABELS`
    order (`rtax.core.series`)."""
    return tuple(str(v) for v in Series.of(run).values())


def outcome(run: Mapping[str, Any]) -> tuple[str, str]:
    """(status, error_class) labels: ``ok``/``none``, ``failed`` with the class, or
    ``harness_error`` (rtax's own trouble, its engine's included: never a substrate's
    failure)."""
    if run.get("status") == "ok":
        return "ok", "none"
    cls = str(run.get("error_class") or "unknown")
    return (HARNESS_ERROR if cls in OWN_ERRORS else "failed"), cls


class Metrics:
    """The metrics of one scheduler, in a registry of its own. `clock` gives the time (epoch
    seconds) the last-probe age is measured at, read at each scrape; `objectives` are those
    whose SLI events it counts (the configuration's ``[[slos]]``)."""

    def __init__(
        self, clock: Callable[[], float] = time.time, objectives: Iterable[Objective] = ()
    ) -> None:
        from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

        self.registry = CollectorRegistry()
        self.clock = clock
        self.objectives = tuple(objectives)
        labels, reg = SERIES_LABELS, self.registry
        self.time_to_first_command = Histogram(
            "rtax_time_to_first_command_seconds",
            "create + orchestration + ready of ok rollouts (docs/measurement.md)",
            labels,
            buckets=LATENCY_BUCKETS,
            registry=reg,
        )
        self.episode = Histogram(
            "rtax_episode_seconds",
            "the create request to the end of the last action, ok rollouts",
            labels,
            buckets=LATENCY_BUCKETS,
            registry=reg,
        )
        self.phase = Histogram(
            "rtax_phase_seconds",
            "each phase of ok rollouts (create, orchestration, ready, setup, actions, cleanup)",
            (*labels, "phase"),
            buckets=PHASE_BUCKETS,
            registry=reg,
        )
        self.rollouts = Counter(
            "rtax_rollouts_total",
            "rollouts stored, by status (ok, failed, harness_error) and error class",
            (*labels, "status", "error_class"),
            registry=reg,
        )
        self.slo_events = Counter(
            "rtax_slo_events_total",
            "an objective's SLI events: rollouts it judges (docs/alerts.md#objectives-slos)",
            ("slo", *labels),
            registry=reg,
        )
        self.slo_good = Counter(
            "rtax_slo_good_total",
            "an objective's good SLI events (ok; for a latency, at or below its threshold)",
            ("slo", *labels),
            registry=reg,
        )
        target = Gauge(
            "rtax_slo_target_ratio",
            "an objective's target: the share of its events that must be good",
            ("slo",),
            registry=reg,
        )
        for objective in self.objectives:
            target.labels(objective.name).set(objective.target)
        self._last: dict[LabelValues, float] = {}
        self._lock = threading.Lock()
        reg.register(_LastProbe(self))

    def observe(self, record: RolloutRecord | Mapping[str, Any]) -> None:
        """Count one stored rollout; an ok one's latencies go into the histograms."""
        run = record.run if isinstance(record, RolloutRecord) else record
        labels = series(run)
        self.rollouts.labels(*labels, *outcome(run)).inc()
        self._probed(labels, run)
        for objective in self._covering(run):
            good = slo.event(run, objective)
            if good is not None:
                self.slo_events.labels(objective.name, *labels).inc()
                if good:
                    self.slo_good.labels(objective.name, *labels).inc()
        if run.get("status") != "ok":
            return
        for histogram, column in (
            (self.time_to_first_command, "time_to_first_command_s"),
            (self.episode, "episode_s"),
        ):
            if (value := finite(run.get(column))) is not None:
                histogram.labels(*labels).observe(value)
        for phase in PHASES:
            if (value := finite(run.get(f"{phase}_s"))) is not None:
                self.phase.labels(*labels, phase).observe(value)

    def seed(self, store: Store, days: float = SEED_DAYS) -> int:
        """Take the last probe of every series from the scheduler's rollouts of the last `days`
        of `store` (a plan made them: ``rtax probe --db`` rows are another process's, counted
        nowhere here), and create its children at zero (so ``rate`` sees their first
        increment); return the rows taken."""
        since = (datetime.now(UTC) - timedelta(days=days)).isoformat(timespec="microseconds")
        rows = store.runs.read(columns=[*_SEED_COLUMNS], since=since).to_dict("records")
        rows = [run for run in rows if isinstance(run.get("plan"), str)]
        for run in rows:
            labels = series(run)
            self._probed(labels, run)
            self.rollouts.labels(*labels, *outcome(run))
            self.time_to_first_command.labels(*labels)
            self.episode.labels(*labels)
            for phase in PHASES:
                self.phase.labels(*labels, phase)
            for objective in self._covering(run):
                self.slo_events.labels(objective.name, *labels)
                self.slo_good.labels(objective.name, *labels)
        return len(rows)

    def _covering(self, run: Mapping[str, Any]) -> list[Objective]:
        if not self.objectives:
            return []
        found = Series.of(run)
        return [o for o in self.objectives if o.covers(found)]

    def last_probes(self) -> dict[LabelValues, float]:
        """Per series, when its newest stored rollout ended (epoch seconds)."""
        with self._lock:
            return dict(self._last)

    def _probed(self, labels: LabelValues, run: Mapping[str, Any]) -> None:
        when = _epoch(run.get("ended_at")) or _epoch(run.get("started_at"))
        if when is None:
            return
        with self._lock:
            self._last[labels] = max(when, self._last.get(labels, when))


_SEED_COLUMNS = (*SERIES_LABELS, "status", "error_class", "started_at", "ended_at", "plan")


class _LastProbe:
    """The last-probe gauges, computed at each scrape (an age set at write time would be stale
    by the next scrape)."""

    def __init__(self, metrics: Metrics) -> None:
        self.metrics = metrics

    def describe(self) -> Iterable[Any]:
        return self._families({}, 0.0)

    def collect(self) -> Iterable[Any]:
        return self._families(self.metrics.last_probes(), self.metrics.clock())

    def _families(self, last: dict[LabelValues, float], now: float) -> list[Any]:
        from prometheus_client.core import GaugeMetricFamily

        stamp = GaugeMetricFamily(
            "rtax_last_probe_timestamp_seconds",
            "when the series' newest stored rollout ended (Unix time)",
            labels=SERIES_LABELS,
        )
        age = GaugeMetricFamily(
            "rtax_last_probe_age_seconds",
            "seconds since the series' newest stored rollout ended",
            labels=SERIES_LABELS,
        )
        for labels, when in sorted(last.items()):
            stamp.add_metric(list(labels), when)
            age.add_metric(list(labels), max(now - when, 0.0))
        return [stamp, age]


class Endpoint:
    """``/metrics`` served over HTTP from a thread of its own (prometheus_client's server)."""

    def __init__(self, metrics: Metrics, address: str, port: int) -> None:
        from prometheus_client import start_http_server

        self.server, self.thread = start_http_server(port, addr=address, registry=metrics.registry)
        host = f"[{address}]" if ":" in address else address
        self.url = f"http://{host}:{self.server.server_port}/metrics"

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(timeout=5)


def serve(metrics: Metrics, settings: MetricsSettings, log: logging.Logger) -> Endpoint | None:
    """Serve `metrics` as `settings` say; None when disabled or the port can't be had (said
    in the log: the scheduler keeps probing without it)."""
    if not settings.enabled:
        return None
    try:
        endpoint = Endpoint(metrics, settings.address, settings.port)
    except OSError as exc:
        log.error(
            "metrics: cannot listen on %s:%d (%s); probing goes on without /metrics",
            settings.address,
            settings.port,
            exc,
        )
        return None
    log.info("metrics: serving %s", endpoint.url)
    return endpoint


def _epoch(value: Any) -> float | None:
    """An ISO 8601 timestamp (UTC when it names no zone) as Unix time, or None."""
    if not isinstance(value, str) or not value:
        return None
    try:
        when = datetime.fromisoformat(value)
    except ValueError:
        return None
    return (when if when.tzinfo else when.replace(tzinfo=UTC)).timestamp()
