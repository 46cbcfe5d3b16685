"""Objectives (SLOs), their error budgets and burn-rate alerts: pure functions of one series'
runs (docs/alerts.md#objectives-slos).

Why objectives beside the rules: a rule says "this is bad now"; an objective says how much bad a
period may hold ("time to first command at most 1 s for 99 % of rollouts over 28 days") and
alerts on how fast that allowance is spent, in the words Prometheus users write (the SRE
workbook's multi-window, multi-burn-rate alerts). Every series an objective's selector covers
has a budget of its own.

The SLI's events (docs/measurement.md#failures), one home for what counts:

- **success** (``success_rate``): every rollout the substrate answers for; good when ok. rtax's
  own errors (``harness_error``, ``engine_error``) are no event at all, as they lower no
  success rate.
- **latency** (``time_to_first_command``, ``episode``): every *successful* rollout with a
  measured latency; good when it is at or below the threshold. A failed rollout is no event
  of a latency objective: it has no latency to compare (a failure never enters latency
  statistics as a number), and it is a bad event of the success objective, so one failure
  spends one budget, not two. A latency objective alone says nothing of a series that fails
  every rollout: pair it with a success objective (the shipped rtax.toml does).

The arithmetic, over the events of a span (the period, or a window ending now):

- budget: allowed bad = (1 - target) x events; remaining = 1 - bad / allowed, negative once
  overspent, None without an event;
- burn rate = (bad / events) / (1 - target): 1 spends exactly the budget over the period;
  None without an event.

An alert pair (long, short, factor) fires when both windows burn at or above the factor. A
window without an event can't tell, so a pair whose long window burns at or above its factor
while its short window is empty (or whose long window is empty) is *unknown*: it neither opens
nor resolves an incident. A pair with either window below its factor is known not to fire. At
one probe per 5 minutes a 5-minute window holds 0 or 1 rollouts: the short window then asks
"was the newest rollout bad?", which is its job (the alert resets one good rollout after the
burn stops), and the few moments it holds none wait for the next rollout.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from fractions import Fraction
from typing import Any

import numpy as np
import pandas as pd

from rtax.analysis import stats
from rtax.analysis.incidents import COLUMNS, Finding, Verdict, stamp
from rtax.analysis.rules import LATENCY_METRICS, Rule
from rtax.core.checks import finite
from rtax.core.failures import OWN_ERRORS
from rtax.core.series import Selector, Series

#: The success SLI's metric (that of the rules and incidents on success).
SUCCESS = "success_rate"
#: The SLIs an objective can have: a latency at or below a threshold, or success.
METRICS: tuple[str, ...] = (*LATENCY_METRICS, SUCCESS)
#: A burn-rate rule's condition and its incidents' detector.
BURN_RATE = "burn_rate"
DEFAULT_PERIOD_S = 28 * 86_400.0


@dataclass(frozen=True)
class Burn:
    """One multi-window alert pair: it fires when the `long_s` and the `short_s` windows ending
    now both burn the budget at least `factor` times as fast as the period allows."""

    long_s: float
    short_s: float
    factor: float

    @property
    def label(self) -> str:
        """``14.4x 1h/5m``: what a rule's name and an alert say."""
        return f"{self.factor:g}x {span(self.long_s)}/{span(self.short_s)}"


#: The SRE workbook's paging pairs: 14.4x over 1 h (2 % of a 30-day budget in an hour, 2.1 %
#: of a 28-day one) confirmed over 5 min, and 6x over 6 h (5 %; 5.4 %) confirmed over 30 min.
DEFAULT_BURN: tuple[Burn, ...] = (Burn(3600.0, 300.0, 14.4), Burn(21_600.0, 1800.0, 6.0))


@dataclass(frozen=True)
class Objective:
    """One ``[[slos]]`` entry: `target` of the events of each series `selector` covers are good
    over `period_s`. `metric` is the SLI: a latency (``time_to_first_command``, ``episode``) at or
    below `threshold_s`, or ``success_rate`` (no threshold)."""

    name: str
    selector: Selector
    metric: str
    target: float
    threshold_s: float | None = None
    period_s: float = DEFAULT_PERIOD_S
    burn: tuple[Burn, ...] = field(default=DEFAULT_BURN)

    @property
    def is_latency(self) -> bool:
        return self.metric in LATENCY_METRICS

    @property
    def column(self) -> str | None:
        """The runs column a latency SLI compares with its threshold (None for success)."""
        return COLUMNS[self.metric] if self.is_latency else None

    @property
    def allowance(self) -> float:
        """The share of events that may be bad: 1 - target."""
        return float(spare(self.target))

    def covers(self, series: Series | Mapping[str, Any]) -> bool:
        return self.selector.matches(series)

    @property
    def indicator(self) -> str:
        """``time to first command <= 1 s`` or ``success``."""
        if not self.is_latency:
            return "success"
        return f"{self.metric.replace('_', ' ')} <= {self.threshold_s:g} s"

    def describe(self) -> str:
        """``time to first command <= 1 s for 99% over 28d``."""
        return f"{self.indicator} for {self.target * 100:.4g}% over {span(self.period_s)}"


@dataclass(frozen=True)
class Counts:
    """The SLI events of a span: how many, and how many of them good."""

    events: int = 0
    good: int = 0

    @property
    def bad(self) -> int:
        return self.events - self.good


@dataclass(frozen=True)
class Budget:
    """An objective's error budget for one series over its period."""

    objective: str
    target: float
    period_s: float
    events: int
    bad: int

    @property
    def allowed(self) -> float:
        """The bad events the period may hold: (1 - target) x events."""
        return float(spare(self.target) * self.events)

    @property
    def remaining(self) -> float | None:
        """The share of the budget left, 1 - bad / allowed: negative once overspent; None
        without an event (nothing allowed, nothing spent)."""
        if not self.events:
            return None
        return float(1 - Fraction(self.bad) / (spare(self.target) * self.events))


@functools.cache
def spare(target: float) -> Fraction:
    """1 - target, exactly, for the decimal the configuration wrote (0.99 is 99/100): a budget
    and a burn rate come out as the arithmetic by hand does (14 bad of 20 at 99 % is 70x, not
    69.99999999999994x), and only the final division rounds."""
    return 1 - Fraction(repr(target))


def budget(objective: Objective, counts: Counts) -> Budget:
    """The budget that `counts` (the events of the period) leave."""
    return Budget(objective.name, objective.target, objective.period_s, counts.events, counts.bad)


def burn_rate(objective: Objective, counts: Counts) -> float | None:
    """How many times faster than the period allows `counts` (a window's events) spend the
    budget: (bad / events) / (1 - target); None when the window holds no event."""
    if not counts.events:
        return None
    return float(Fraction(counts.bad, counts.events) / spare(objective.target))


def fires(objective: Objective, pair: Burn, long: Counts, short: Counts) -> bool | None:
    """Whether `pair` fires on its windows' counts: True when both burn at or above its
    factor, False when either is known to be below, None when it can't tell (the long window
    holds no event, or it burns at or above the factor and the short window holds none)."""
    long_rate = burn_rate(objective, long)
    if long_rate is None:
        return None
    if long_rate < pair.factor:
        return False
    short_rate = burn_rate(objective, short)
    if short_rate is None:
        return None
    return short_rate >= pair.factor


# -- events ------------------------------------------------------------------------------------


def event(run: Mapping[str, Any], objective: Objective) -> bool | None:
    """One run as an SLI event: True good, False bad, None no event (see the module
    docstring; `events` is the same rule over a frame, the store's ``slo_counts`` in SQL)."""
    if run.get("error_class") in OWN_ERRORS:
        return None
    ok = run.get("status") == "ok"
    if not objective.is_latency:
        return ok
    value = finite(run.get(str(objective.column))) if ok else None
    if value is None or value <= 0:
        return None
    return value <= float(objective.threshold_s or 0.0)


def events(runs: pd.DataFrame, objective: Objective) -> pd.DataFrame:
    """The SLI events of `runs`, oldest first: ``started_at`` (as stored), ``t`` (Unix
    seconds) and ``good``."""
    if objective.is_latency:
        ok = stats.successful(runs)
        values = pd.to_numeric(ok[objective.column], errors="coerce").to_numpy(dtype=float)
        keep = np.isfinite(values) & (values > 0)
        picked, good = ok[keep], values[keep] <= float(objective.threshold_s or 0.0)
    else:
        picked = stats.attempts(runs)
        good = (picked["status"] == "ok").to_numpy(dtype=bool)
    moments = pd.to_datetime(picked["started_at"], utc=True, format="ISO8601")
    seconds = (moments - pd.Timestamp(0, tz="UTC")) / pd.Timedelta(seconds=1)
    frame = pd.DataFrame(
        {
            "started_at": picked["started_at"].astype(str).to_numpy(),
            "t": seconds.to_numpy(dtype=float),
            "good": np.asarray(good, dtype=bool),
        }
    )
    return frame.sort_values("t", kind="stable").reset_index(drop=True)


def count(found: pd.DataFrame, since: datetime, until: datetime) -> Counts:
    """The `events` that started from `since` to `until` (both included)."""
    t = found["t"].to_numpy(dtype=float)
    inside = (t >= since.timestamp()) & (t <= until.timestamp())
    return Counts(int(inside.sum()), int(found["good"].to_numpy(dtype=bool)[inside].sum()))


# -- the standing of one series now -----------------------------------------------------------


def windows(objective: Objective) -> tuple[float, ...]:
    """Every window length the objective's pairs read, shortest first."""
    return tuple(sorted({w for b in objective.burn for w in (b.long_s, b.short_s)}))


def reach(objective: Objective) -> float:
    """How far back `verdicts` reads runs: twice the longest long window (an incident's start
    is the rollout since which its pair fired, judged on windows ending at each rollout of the
    long window)."""
    return 2 * max((b.long_s for b in objective.burn), default=0.0)


@dataclass(frozen=True)
class Standing:
    """An objective's standing for one series: its budget over the period, the counts of each
    window ending now, and each pair's verdict (`fires`)."""

    objective: Objective
    budget: Budget
    windows: tuple[tuple[float, Counts], ...]

    def counts(self, window_s: float) -> Counts:
        return dict(self.windows)[window_s]

    def burn(self, window_s: float) -> float | None:
        return burn_rate(self.objective, self.counts(window_s))

    def pairs(self) -> tuple[tuple[Burn, bool | None], ...]:
        return tuple(
            (p, fires(self.objective, p, self.counts(p.long_s), self.counts(p.short_s)))
            for p in self.objective.burn
        )


def standing(objective: Objective, period: Counts, counted: Mapping[float, Counts]) -> Standing:
    """The standing from counts: the period's, and those of each of `windows(objective)`
    (missing ones count as empty)."""
    spans = tuple((w, counted.get(w, Counts())) for w in windows(objective))
    return Standing(objective, budget(objective, period), spans)


def standing_of(runs: pd.DataFrame, objective: Objective, now: datetime) -> Standing:
    """The standing from the runs of one series (covering the period)."""
    found = events(runs, objective)
    period = count(found, now - timedelta(seconds=objective.period_s), now)
    counted = {w: count(found, now - timedelta(seconds=w), now) for w in windows(objective)}
    return standing(objective, period, counted)


# -- alerts ------------------------------------------------------------------------------------


def burn_rules(objective: Objective) -> tuple[Rule, ...]:
    """One rule per alert pair, in the objective's order: its incidents' name
    (``docker-start burn 14.4x 1h/5m``), the SLI's metric, condition ``burn_rate`` and the
    pair's factor as its limit."""
    return tuple(
        Rule(
            name=f"{objective.name} burn {pair.label}",
            metric=objective.metric,
            condition=BURN_RATE,
            limit=pair.factor,
            substrates=objective.selector.substrate,
        )
        for pair in objective.burn
    )


def verdicts(
    runs: pd.DataFrame, objective: Objective, now: datetime, *, period: Counts | None = None
) -> list[Verdict]:
    """Each alert pair's verdict for one series now, in `burn_rules` order.

    `runs`: the series' runs (at least ``started_at``, ``status``, ``error_class`` and the
    SLI's column), any order, reaching back `reach(objective)` at least; when they hold the
    series' dimensions, a series the objective does not cover gets no verdict. `period`: the
    events of the whole period (`rtax.store.runs.Runs.slo_counts`), for the budget the
    finding's detail states; None counts them from `runs`, which then cover the period.

    A finding starts at the rollout since which the pair has fired at every rollout of its
    long window (both windows ending at each), so a burn that stops and comes back is a new
    incident; its magnitude is the lower of the two burn rates over the factor."""
    if runs.empty or not _covered(runs, objective):
        return []
    found = events(runs, objective)
    if period is None:
        period = count(found, now - timedelta(seconds=objective.period_s), now)
    spent = budget(objective, period)
    out = []
    for pair, rule in zip(objective.burn, burn_rules(objective), strict=True):
        since = now - timedelta(seconds=pair.long_s)
        long = count(found, since, now)
        short = count(found, now - timedelta(seconds=pair.short_s), now)
        inside = found[(found["t"] >= since.timestamp()) & (found["t"] <= now.timestamp())]
        newest = str(inside["started_at"].iloc[-1]) if len(inside) else None
        verdict = fires(objective, pair, long, short)
        if not verdict:
            out.append(Verdict(rule, verdict is not None, None, newest))
            continue
        rates = (burn_rate(objective, long) or 0.0, burn_rate(objective, short) or 0.0)
        finding = Finding(
            metric=objective.metric,
            rule=rule.name,
            detector=BURN_RATE,
            start=_start(found, objective, pair, now),
            before_p50=None,
            after_p50=None,
            magnitude=min(rates) / pair.factor,
            detail=detail(objective, pair, long, short, spent),
        )
        out.append(Verdict(rule, True, finding, newest))
    return out


def detail(objective: Objective, pair: Burn, long: Counts, short: Counts, spent: Budget) -> str:
    """A finding's one line: both windows' burn rates with their n, and the budget left."""
    left = spent.remaining
    budget_text = "no budget yet" if left is None else f"budget left {left:.0%}"
    return (
        f"burn {_rate(objective, long)} over {span(pair.long_s)} (n={long.events}) and "
        f"{_rate(objective, short)} over {span(pair.short_s)} (n={short.events}), both >= "
        f"{pair.factor:g}x; {budget_text} ({spent.bad} of {spent.events} bad in "
        f"{span(spent.period_s)}, {spent.allowed:.3g} allowed; {objective.describe()})"
    )


def _start(found: pd.DataFrame, objective: Objective, pair: Burn, now: datetime) -> str:
    """The rollout of the long window since which `pair` has fired at every rollout (windows
    ending at it); when it fires now but not at the newest rollout (good ones left the
    windows since), the first bad rollout of the short window."""
    t = found["t"].to_numpy(dtype=float)
    bad = (~found["good"].to_numpy(dtype=bool)).astype(float)
    total = np.concatenate([[0.0], np.cumsum(bad)])
    end = now.timestamp()
    picked = np.flatnonzero((t >= end - pair.long_s) & (t <= end))
    at = t[picked]

    def burning(width: float) -> np.ndarray:
        hi = np.searchsorted(t, at, side="right")
        lo = np.searchsorted(t, at - width, side="left")
        n = hi - lo
        with np.errstate(divide="ignore", invalid="ignore"):
            rate = (total[hi] - total[lo]) / n / objective.allowance
        return (n > 0) & (rate >= pair.factor)

    firing = burning(pair.long_s) & burning(pair.short_s)
    if firing.size and firing[-1]:
        stops = np.flatnonzero(~firing)
        first = int(stops[-1]) + 1 if stops.size else 0
        return str(found["started_at"].iloc[picked[first]])
    recent = found[(t >= end - pair.short_s) & (t <= end) & (bad > 0)]
    return str(recent["started_at"].iloc[0]) if len(recent) else stamp(now)


def _covered(runs: pd.DataFrame, objective: Objective) -> bool:
    if not {"substrate", "tier"} <= set(runs.columns):
        return True  # the caller picked the series
    return objective.covers(Series.of(runs.iloc[-1].to_dict()))


def _rate(objective: Objective, counts: Counts) -> str:
    rate = burn_rate(objective, counts)
    return "n/a" if rate is None else f"{rate:.3g}x"


def span(seconds: float) -> str:
    """A window or period as the SRE workbook writes it: ``5m``, ``1h``, ``28d``, else
    seconds (``90s``)."""
    for size, unit in ((86_400, "d"), (3600, "h"), (60, "m")):
        if seconds >= size and float(seconds) % size == 0:
            return f"{seconds / size:g}{unit}"
    return f"{seconds:g}s"
