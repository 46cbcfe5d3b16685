"""Detection settings and alert rules: what the ``[detection]`` and ``[alerts]`` tables mean.

Why a module of their own (docs/alerts.md): what opens an incident must be written down and
reviewable like the plans; the pure detection code (`rtax.analysis.incidents`) reads these
types, and the file's reader (`rtax.settings.alerts`) builds them, one line per mistake. Every
rule has exactly one condition, so an incident always names the one rule that opened it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from rtax.analysis.changepoint import Binseg, Scan

#: The per-series metrics a rule can watch: the two latencies (on successful rollouts), the
#: success rate, and staleness (time since the last probe of the series).
LATENCY_METRICS: tuple[str, ...] = ("time_to_first_command", "episode")
METRICS: tuple[str, ...] = (*LATENCY_METRICS, "success_rate", "staleness")
#: A rule's condition: one of these keys, with its limit.
CONDITIONS: dict[str, str] = {
    "p95_above": "p95 of the last `samples` successful rollouts above this duration",
    "success_below": "success rate of the last `samples` rollouts below this fraction",
    "stale_after": "no probe of the series for this long",
    "change_above": "a detected change worse by at least this ratio",
}


@dataclass(frozen=True)
class Rule:
    """One alert rule: `condition` (a key of `CONDITIONS`) on `metric`, with `limit`
    (seconds, a fraction or a ratio), over the series of `substrates` (empty: all)."""

    name: str
    metric: str
    condition: str
    limit: float
    samples: int = 20
    substrates: tuple[str, ...] = ()

    def applies(self, substrate: str) -> bool:
        return not self.substrates or substrate in self.substrates


#: Without an ``[alerts]`` table: changes of both latencies by 1.3x, of success by 1.1x (e.g.
#: 100 % -> 90 %): docs/alerts.md#evaluation measures what they catch and how often they err.
DEFAULT_RULES: tuple[Rule, ...] = (
    Rule("ttfc-change", "time_to_first_command", "change_above", 1.3),
    Rule("episode-change", "episode", "change_above", 1.3),
    Rule("success-change", "success_rate", "change_above", 1.1),
)


@dataclass(frozen=True)
class Detection:
    """How and how often change points are looked for (docs/alerts.md#detection)."""

    interval_s: float = 60.0
    #: the newest rollouts per series that detection reads (bounded work per run)
    window: int = 200
    latency: Binseg = field(default_factory=Binseg)
    success: Scan = field(default_factory=Scan)
    #: the newest samples that must be back nearer the old level for a change to resolve
    recovery_samples: int = 10
    #: samples at the new level after which a change that has not returned is accepted as the
    #: new baseline: its incident resolves so, and detection goes on from the new level
    baseline_samples: int = 100


@dataclass(frozen=True)
class Alerts:
    """Where alerts go and how often (docs/alerts.md#delivery). No webhook: incidents are
    recorded and listed, nothing is sent."""

    webhook: str | None = None
    #: an environment variable holding the webhook URL (a Slack URL is a credential)
    webhook_env: str | None = None
    cooldown_s: float = 1800.0
    timeout_s: float = 5.0
    backoff_s: float = 5.0
    max_backoff_s: float = 600.0
    rules: tuple[Rule, ...] = field(default=DEFAULT_RULES)
    #: K: where two or more vantages probe one substrate, an incident seen from at least K of
    #: them meets the quorum (docs/alerts.md#vantage-quorum)
    quorum: int = 2
