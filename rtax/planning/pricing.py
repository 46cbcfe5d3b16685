"""Rates and dollars: a substrate's limits and prices, and what they make of a plan.

Why (docs/configuration.md#limits-and-prices): account limits of a few creates per second and a
few hundred concurrent environments cap a fleet long before boot time does (at 5 creates/s a
million rollouts spend 55.6 h creating), and budgets are in dollars. So each `[[substrates]]`
entry may carry `limits` and `prices`; the functions here turn them, with measured means, into
a plan's wall-clock floor, its billed and useful seconds and its dollars per million rollouts.

Every price names its `source` (where it was read, a URL) and the `date` it was read: a price
without them is refused, because a number whose origin nobody can check is not a price. A value
may be the string ``"unset"``: the shape is written down, the number is not (yet) known, and the
page says so instead of inventing one.

The tables are read and checked by `rtax.settings.prices` (one line per mistake); here the
arithmetic is pure and tested by hand (tests/test_pricing.py). Totals use means
(docs/measurement.md#statistics).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import date

#: A value written down as not known (yet): the page says so instead of inventing a number.
UNSET = "unset"
#: The price keys: per environment-hour by its size, per environment-hour flat (an instance),
#: and per request (one per environment created).
PRICE_KEYS = ("per_vcpu_hour", "per_gib_hour", "per_instance_hour", "per_request")


@dataclass(frozen=True)
class Limits:
    """The account's limits on one substrate (None: not configured)."""

    max_concurrent: int | None = None
    creates_per_s: float | None = None


@dataclass(frozen=True)
class Price:
    """One price in US dollars, where it was read and when."""

    usd: float
    source: str
    date: date


@dataclass(frozen=True)
class Billing:
    """How a provider rounds an environment's lifetime into billed time: at least
    `minimum_s`, then in whole steps of `granularity_s` (per-second billing: 1). Per provider,
    in the dated price table like a price (`source`, `date`); None there: per second, no
    minimum, and the page says it assumed so."""

    minimum_s: float = 0.0
    granularity_s: float = 1.0
    source: str | None = None
    date: date | None = None

    def billed_s(self, lifetime_s: float) -> float:
        """What the provider bills for one environment that lived `lifetime_s`."""
        if lifetime_s <= 0:
            return self.minimum_s
        steps = math.ceil(round(lifetime_s / self.granularity_s, 9))
        return max(self.minimum_s, steps * self.granularity_s)

    def describe(self) -> str:
        """The rule in words, with where it came from: "60 s minimum, then per 1 s (source,
        2026-01-01)"; "per 1 s, no minimum (assumed)" where no source is written down."""
        rule = f"per {self.granularity_s:g} s"
        rule = (
            f"{self.minimum_s:g} s minimum, then {rule}"
            if self.minimum_s
            else f"{rule}, no minimum"
        )
        if self.source is None:
            return f"{rule} (assumed: not in the price table)"
        return f"{rule} ({self.source}{f', {self.date}' if self.date else ''})"


@dataclass(frozen=True)
class Prices:
    """The environment's size and its prices (None: unset)."""

    vcpus: float | None = None
    memory_gib: float | None = None
    per_vcpu_hour: Price | None = None
    per_gib_hour: Price | None = None
    per_instance_hour: Price | None = None
    per_request: Price | None = None
    #: how the provider rounds billed time (None: not written down; per second assumed)
    billing: Billing | None = None

    def unset(self) -> tuple[str, ...]:
        """The price keys with no number."""
        return tuple(k for k in PRICE_KEYS if getattr(self, k) is None)

    def configured(self) -> bool:
        return len(self.unset()) < len(PRICE_KEYS)

    def hourly_usd(self) -> float:
        """Dollars per environment-hour: vCPUs x per_vcpu_hour + GiB x per_gib_hour +
        per_instance_hour, over the prices that are set."""
        total = 0.0
        if self.per_vcpu_hour is not None and self.vcpus is not None:
            total += self.vcpus * self.per_vcpu_hour.usd
        if self.per_gib_hour is not None and self.memory_gib is not None:
            total += self.memory_gib * self.per_gib_hour.usd
        if self.per_instance_hour is not None:
            total += self.per_instance_hour.usd
        return total


@dataclass(frozen=True)
class Floor:
    """The shortest wall-clock time a plan can take, and which bound sets it."""

    seconds: float
    #: rollouts / creates_per_s (None: no create rate configured)
    create_s: float | None
    #: rollouts x seconds per rollout / (max_concurrent - pool size)
    concurrency_s: float | None
    #: rollouts x seconds per rollout / workers
    workers_s: float | None
    binding: str


def wall_clock_floor(
    rollouts: int,
    seconds_per_rollout: float,
    *,
    limits: Limits = Limits(),
    workers: int | None = None,
    pool_size: int = 0,
) -> Floor:
    """No plan of `rollouts` finishes before every bound allows: the create rate (each rollout
    creates one environment), the concurrency limit (an environment counts from its create
    request to its verified deletion, `seconds_per_rollout`: the mean wall time; a warm pool's
    environments count against the limit too) and the workers."""
    if rollouts < 0 or seconds_per_rollout < 0:
        raise ValueError("rollouts and seconds_per_rollout must be >= 0")
    held = rollouts * seconds_per_rollout
    create_s = rollouts / limits.creates_per_s if limits.creates_per_s else None
    concurrency_s = None
    if limits.max_concurrent:
        if pool_size >= limits.max_concurrent:
            raise ValueError(f"a pool of {pool_size} takes all {limits.max_concurrent} slots")
        concurrency_s = held / (limits.max_concurrent - pool_size)
    workers_s = held / workers if workers else None
    bounds = {"creates_per_s": create_s, "max_concurrent": concurrency_s, "workers": workers_s}
    known = {k: v for k, v in bounds.items() if v is not None}
    if not known:
        return Floor(math.nan, None, None, None, "none")
    binding = max(known, key=lambda k: known[k])
    return Floor(known[binding], create_s, concurrency_s, workers_s, binding)


@dataclass(frozen=True)
class Billed:
    """Environment-seconds a provider bills for a plan."""

    #: rollouts x mean wall time (create request to verified deletion)
    rollouts_s: float
    #: ready environments idle in a warm pool
    idle_pool_s: float

    @property
    def total_s(self) -> float:
        return self.rollouts_s + self.idle_pool_s


def billed_seconds(
    rollouts: int,
    wall_s: float,
    *,
    pool_size: int = 0,
    duration_s: float = 0.0,
    ttfc_s: float = 0.0,
) -> Billed:
    """Billed environment-seconds: each rollout's environment from its create request to its
    verified deletion (`wall_s`, the mean), plus the idle capacity of a warm pool.

    A pool keeps `pool_size` slots filled for the plan's `duration_s`, each slot holding an
    environment being created or ready; the creating part of that time is each pooled
    rollout's own create-to-ready (`ttfc_s`, already in its wall time), so the pool adds at most
    pool_size x duration_s - rollouts x ttfc_s of ready, unclaimed environment-time."""
    if rollouts < 0 or wall_s < 0 or pool_size < 0 or duration_s < 0 or ttfc_s < 0:
        raise ValueError("rollouts, seconds and the pool size must be >= 0")
    idle = max(0.0, pool_size * duration_s - rollouts * ttfc_s) if pool_size else 0.0
    return Billed(rollouts * wall_s, idle)


def useful_seconds(rollouts: int, actions_s: float) -> float:
    """Seconds of the plan spent in its actions (the work the fleet is for): rollouts x mean."""
    return rollouts * actions_s


@dataclass(frozen=True)
class Dollars:
    """What a plan costs at the configured prices (only those set)."""

    compute_usd: float
    request_usd: float
    #: the price keys left "unset": the total leaves them out
    unset: tuple[str, ...]

    @property
    def total_usd(self) -> float:
        return self.compute_usd + self.request_usd


def dollars(prices: Prices, billed_s: float, creates: int) -> Dollars:
    """Dollars of `billed_s` environment-seconds and `creates` environments created (one
    request each): hourly price x billed hours + per_request x creates."""
    request = prices.per_request.usd * creates if prices.per_request else 0.0
    return Dollars(prices.hourly_usd() * billed_s / 3600.0, request, prices.unset())


def per_million(usd: float, rollouts: int) -> float:
    """Dollars per million rollouts of a plan of `rollouts` that costs `usd`."""
    return usd / rollouts * 1e6 if rollouts else math.nan


# -- what a successful rollout costs ---------------------------------------------------------


@dataclass(frozen=True)
class PerSuccess:
    """What one **successful** rollout costs, with each part that a price per
    environment-hour leaves out named apart (docs/measurement.md#dollars-per-successful-rollout).
    Seconds are environment-seconds per successful rollout unless named worker-."""

    #: the measured share of attempts that succeeded
    success_rate: float
    #: attempts per rollout under the retry policy, and per successful rollout
    attempts_per_rollout: float
    attempts_per_success: float
    #: the share of rollouts that succeed within the retries
    rollout_success: float
    #: lifetimes of the attempts, as measured (create request to verified deletion)
    lived_s: float
    #: what billing minimums and granularity add to them
    rounding_s: float
    #: environments that ran on past their rollout until the reaper found them
    leaked_s: float
    #: the warm pool's ready, unclaimed environments
    idle_pool_s: float
    #: dollars at the configured prices (hourly x billed hours + per request x attempts)
    usd: float
    #: today's figure for comparison: mean lifetime of one rollout x the hourly price, no
    #: failures, retries, rounding, leaks or pool
    naive_usd: float
    #: the billing rule applied (the one given, else the price table's, else per second)
    billing: Billing

    @property
    def billed_s(self) -> float:
        return self.lived_s + self.rounding_s + self.leaked_s + self.idle_pool_s

    @property
    def worker_s(self) -> float:
        """Worker-seconds: a worker waits for each attempt's whole lifetime, no more (billing
        rounds, leaks and the pool cost dollars, not a worker's time)."""
        return self.lived_s


def per_successful_rollout(
    ok_lifetimes_s: list[float] | tuple[float, ...],
    failed_lifetimes_s: list[float] | tuple[float, ...],
    prices: Prices,
    *,
    retries: int = 0,
    billing: Billing | None = None,
    leaked_s_per_attempt: float = 0.0,
    pool_size: int = 0,
    pool_idle_s: float = 0.0,
    rollouts: int = 1,
) -> PerSuccess:
    """What a successful rollout costs from measured attempts: each attempt (a success with
    its measured lifetime, a failure with its own) billed as `billing` (else the price
    table's `prices.billing`, else per second) rounds it; a failed
    attempt retried up to `retries` times, so a rollout takes 1 + f + ... + f^retries attempts
    (f the failure rate) and succeeds with 1 - f^(retries + 1); the seconds environments ran
    on past their rollout (`leaked_s_per_attempt`, as the reaper found them) and a pool of
    `pool_size` environments idle for `pool_idle_s` each over a plan of `rollouts` rollouts,
    spread over the plan's successful ones."""
    if not ok_lifetimes_s:
        raise ValueError("no successful attempt measured: a successful rollout has no cost yet")
    if retries < 0 or pool_size < 0 or pool_idle_s < 0 or rollouts < 1:
        raise ValueError("retries, the pool and its idle time must be >= 0; rollouts >= 1")
    if leaked_s_per_attempt < 0:
        raise ValueError("leaked seconds must be >= 0")
    rule = billing or prices.billing or Billing()  # the price table's, unless given
    ok, failed = list(ok_lifetimes_s), list(failed_lifetimes_s)
    fail = len(failed) / (len(ok) + len(failed))
    attempts = sum(fail**i for i in range(retries + 1))
    succeeds = 1.0 - fail ** (retries + 1)
    per_success = attempts / succeeds

    def mean(values: list[float]) -> float:
        return sum(values) / len(values) if values else 0.0

    lived = (1 - fail) * mean(ok) + fail * mean(failed)
    billed = (1 - fail) * mean([rule.billed_s(t) for t in ok]) + fail * mean(
        [rule.billed_s(t) for t in failed]
    )
    idle = pool_size * pool_idle_s / (rollouts * succeeds)
    env_s = per_success * billed + per_success * leaked_s_per_attempt + idle
    usd = prices.hourly_usd() * env_s / 3600.0
    if prices.per_request is not None:
        usd += prices.per_request.usd * per_success
    naive = prices.hourly_usd() * mean(ok) / 3600.0
    return PerSuccess(
        success_rate=1.0 - fail,
        attempts_per_rollout=attempts,
        attempts_per_success=per_success,
        rollout_success=succeeds,
        lived_s=per_success * lived,
        rounding_s=per_success * (billed - lived),
        leaked_s=per_success * leaked_s_per_attempt,
        idle_pool_s=idle,
        usd=usd,
        naive_usd=naive,
        billing=rule,
    )
