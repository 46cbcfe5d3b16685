"""Limits and prices: parsed with source and date, and turned into a plan's floor, billed and
useful seconds and dollars, against figures worked out by hand (docs/configuration.md)."""

from __future__ import annotations

import math
import re
import tomllib
from datetime import date
from pathlib import Path

import pytest

from rtax.planning import pricing
from rtax.planning.pricing import Limits, Price, Prices
from rtax.settings import config

READ = date(2026, 1, 15)


def _price(usd: float) -> Price:
    return Price(usd, "https://example.invalid/pricing", READ)


def _conf(tmp_path: Path, text: str) -> config.Config:
    return config.parse(tomllib.loads(text), base=tmp_path)


ENTRY = '[[substrates]]\nname = "cloud"\nkind = "daytona"\n'


def test_limits_and_prices_are_read_from_the_substrate_entry(tmp_path: Path) -> None:
    conf = _conf(
        tmp_path,
        ENTRY
        + "limits = { max_concurrent = 200, creates_per_s = 5 }\n"
        + "[substrates.prices]\nvcpus = 2\nmemory_gib = 4\n"
        + 'per_vcpu_hour = { usd = 0.05, source = "https://a.example/p", date = 2026-01-15 }\n'
        + 'per_gib_hour = { usd = 0.01, source = "https://a.example/p", date = "2026-01-15" }\n'
        + 'per_request = "unset"\n',
    )
    cloud = conf.substrates["cloud"]
    assert cloud.limits == Limits(200, 5)
    assert cloud.prices.per_vcpu_hour == Price(0.05, "https://a.example/p", READ)
    assert cloud.prices.per_gib_hour.date == READ  # a TOML date or an ISO string
    assert cloud.prices.unset() == ("per_instance_hour", "per_request")
    assert cloud.prices.hourly_usd() == pytest.approx(2 * 0.05 + 4 * 0.01)


def test_without_limits_or_prices_nothing_is_configured(tmp_path: Path) -> None:
    cloud = _conf(tmp_path, ENTRY).substrates["cloud"]
    assert cloud.limits == Limits() and not cloud.prices.configured()


def test_placeholders_are_unset_not_numbers(tmp_path: Path) -> None:
    cloud = _conf(
        tmp_path,
        ENTRY
        + 'limits = { max_concurrent = "unset", creates_per_s = "unset" }\n'
        + 'prices = { vcpus = "unset", per_vcpu_hour = "unset", per_request = "unset" }\n',
    ).substrates["cloud"]
    assert cloud.limits == Limits() and cloud.prices == Prices()


@pytest.mark.parametrize(
    ("prices", "complaint"),
    [
        ("per_request = { usd = 0.001 }", "missing source, date"),
        ("per_request = { usd = 0.001, date = 2026-01-01 }", "missing source"),
        ('per_request = { usd = 0.001, source = "https://x" }', "missing date"),
        ('per_request = { usd = 0.001, source = "", date = 2026-01-01 }', "where the price"),
        ('per_request = { usd = 0.001, source = "x", date = "last week" }', "date the price"),
        ('per_request = { usd = 0.001, source = "x", date = 2999-01-01 }', "in the future"),
        ('per_request = { usd = -1, source = "x", date = 2026-01-01 }', ">= 0"),
        ("per_request = 0.001", "source ="),
        ('per_vcpu_hour = { usd = 0.05, source = "x", date = 2026-01-01 }', "needs"),
        ('per_hour = "unset"', "unknown key"),
        ('per_request = { usd = 1, source = "x", date = 2026-01-01, note = "" }', "unknown"),
    ],
)
def test_a_price_without_source_or_date_is_refused(
    tmp_path: Path, prices: str, complaint: str
) -> None:
    with pytest.raises(config.ConfigError) as caught:
        _conf(tmp_path, ENTRY + f"[substrates.prices]\n{prices}\n")
    assert complaint in str(caught.value)
    assert "substrates.cloud.prices" in str(caught.value)


@pytest.mark.parametrize(
    "limits",
    ["max_concurrent = 0", "max_concurrent = 2.5", "creates_per_s = -1", "creates_per_s = true"],
)
def test_bad_limits_are_refused(tmp_path: Path, limits: str) -> None:
    with pytest.raises(config.ConfigError, match=r"substrates\.cloud\.limits\."):
        _conf(tmp_path, ENTRY + f"limits = {{ {limits} }}\n")


def test_the_create_rate_floor_of_a_million_rollouts() -> None:
    """The issue's example: at 5 creates/s, a million rollouts spend 200,000 s = 55.6 h
    creating, however many workers there are."""
    floor = pricing.wall_clock_floor(
        1_000_000, 60.0, limits=Limits(max_concurrent=500, creates_per_s=5), workers=1_000
    )
    assert floor.create_s == 200_000 and round(floor.create_s / 3600, 1) == 55.6
    assert floor.concurrency_s == 1_000_000 * 60 / 500  # 120,000 s
    assert floor.workers_s == 60_000
    assert (floor.seconds, floor.binding) == (200_000, "creates_per_s")


def test_the_concurrency_floor_binds_for_long_rollouts_and_a_pool_uses_slots() -> None:
    limits = Limits(max_concurrent=500, creates_per_s=5)
    long = pricing.wall_clock_floor(1_000_000, 600.0, limits=limits, workers=10_000)
    assert (long.seconds, long.binding) == (1_200_000, "max_concurrent")
    pooled = pricing.wall_clock_floor(1_000_000, 600.0, limits=limits, pool_size=100)
    assert pooled.concurrency_s == 1_000_000 * 600 / 400
    with pytest.raises(ValueError):
        pricing.wall_clock_floor(10, 1.0, limits=limits, pool_size=500)
    few_workers = pricing.wall_clock_floor(1_000, 60.0, limits=limits, workers=10)
    assert (few_workers.seconds, few_workers.binding) == (6_000, "workers")
    assert math.isnan(pricing.wall_clock_floor(10, 1.0).seconds)


def test_billed_against_useful_seconds() -> None:
    """1,000 rollouts of 10 s wall (6 s of actions, 2 s to first command) with a pool of 5
    over an hour: the rollouts bill 10,000 s; the pool's slots hold 5 x 3,600 = 18,000 s, of
    which 1,000 x 2 s is the rollouts' own creation, so it adds 16,000 s idle."""
    cold = pricing.billed_seconds(1_000, 10.0)
    assert (cold.rollouts_s, cold.idle_pool_s, cold.total_s) == (10_000, 0, 10_000)
    pooled = pricing.billed_seconds(1_000, 10.0, pool_size=5, duration_s=3_600, ttfc_s=2.0)
    assert (pooled.idle_pool_s, pooled.total_s) == (16_000, 26_000)
    assert pricing.useful_seconds(1_000, 6.0) == 6_000
    # a pool always claimed never idles (the bound never goes below zero)
    assert pricing.billed_seconds(10, 1.0, pool_size=1, duration_s=1, ttfc_s=5).idle_pool_s == 0


def test_dollars_per_million_rollouts() -> None:
    """2 vCPU x $0.05 + 4 GiB x $0.01 = $0.14 per environment-hour; 36,000 billed s = 10 h ->
    $1.40; 1,000 creates at $0.001 -> $1.00; $2.40 for 1,000 rollouts = $2,400 per million."""
    prices = Prices(
        vcpus=2,
        memory_gib=4,
        per_vcpu_hour=_price(0.05),
        per_gib_hour=_price(0.01),
        per_request=_price(0.001),
    )
    cost = pricing.dollars(prices, 36_000, 1_000)
    assert cost.compute_usd == pytest.approx(1.40) and cost.request_usd == pytest.approx(1.0)
    assert pricing.per_million(cost.total_usd, 1_000) == pytest.approx(2_400)
    assert cost.unset == ("per_instance_hour",)
    instance = Prices(per_instance_hour=_price(0.0832))
    assert pricing.dollars(instance, 7_200, 5).total_usd == pytest.approx(0.1664)


def test_dollars_per_successful_rollout_by_hand() -> None:
    """Nine attempts of ten succeed (100.4 s each), one fails after 30 s; one retry; billing
    is at least 60 s, then per second; 10 pooled environments idle for an hour over a plan of
    1,000 rollouts; 1 vCPU at $0.36 an hour ($0.0001 a second). By hand:
    attempts per rollout 1 + 0.1 = 1.1, rollouts that succeed 1 - 0.1^2 = 0.99, so 1.1/0.99 =
    1.111 attempts per success. An attempt lives 0.9 x 100.4 + 0.1 x 30 = 93.36 s and is billed
    0.9 x 101 + 0.1 x 60 = 96.9 s (rounding 3.54 s). The pool's 36,000 s spread over the
    plan's 990 successes: 36.364 s each. Billed per success 1.111 x 96.9 + 36.364 = 144.030 s:
    $0.014403, $14,403 per million successful rollouts, against today's figure 100.4 s x
    $0.0001 = $10,040 per million."""
    prices = Prices(
        vcpus=1, per_vcpu_hour=Price(0.36, "https://example.test/prices", date(2026, 5, 1))
    )
    got = pricing.per_successful_rollout(
        [100.4] * 9,
        [30.0],
        prices,
        retries=1,
        billing=pricing.Billing(minimum_s=60, granularity_s=1),
        pool_size=10,
        pool_idle_s=3600,
        rollouts=1_000,
    )
    assert got.success_rate == pytest.approx(0.9)
    assert got.attempts_per_rollout == pytest.approx(1.1)
    assert got.rollout_success == pytest.approx(0.99)
    assert got.attempts_per_success == pytest.approx(1.1 / 0.99)
    assert got.lived_s == pytest.approx(93.36 / 0.9)
    assert got.rounding_s == pytest.approx(3.54 / 0.9)
    assert got.idle_pool_s == pytest.approx(36_000 / 990)
    assert got.billed_s == pytest.approx(144.0303, abs=1e-3)
    assert got.worker_s == pytest.approx(103.7333, abs=1e-3)
    assert got.usd * 1e6 == pytest.approx(14_403.03, abs=0.01)
    assert got.naive_usd * 1e6 == pytest.approx(10_040.0)


def test_billing_rounds_up_to_its_step_and_minimum() -> None:
    per_minute = pricing.Billing(minimum_s=60, granularity_s=60)
    assert [per_minute.billed_s(t) for t in (0, 1, 60, 60.5, 121)] == [60, 60, 60, 120, 180]
    assert pricing.Billing().billed_s(2.1) == 3  # per second, no minimum
    assert pricing.Billing().billed_s(3.0) == 3  # a whole step is not rounded again


def test_a_leak_is_billed_per_attempt_and_no_success_is_refused() -> None:
    prices = Prices(per_instance_hour=Price(3.6, "https://example.test/prices", date(2026, 5, 1)))
    got = pricing.per_successful_rollout([10.0, 10.0], [], prices, leaked_s_per_attempt=5.0)
    assert got.billed_s == pytest.approx(15.0) and got.usd == pytest.approx(0.015)
    with pytest.raises(ValueError, match="no successful attempt"):
        pricing.per_successful_rollout([], [4.0], prices)


def test_the_billing_rule_is_read_dated_and_sourced(tmp_path: Path) -> None:
    cloud = _conf(
        tmp_path,
        ENTRY
        + "[substrates.prices]\n"
        + 'billing = { minimum_s = 60, granularity_s = 1, source = "https://a.example/b", '
        + "date = 2026-01-15 }\n",
    ).substrates["cloud"]
    assert cloud.prices.billing == pricing.Billing(60.0, 1.0, "https://a.example/b", READ)
    assert cloud.prices.billing.billed_s(12.2) == 60 and cloud.prices.billing.billed_s(61.2) == 62


@pytest.mark.parametrize(
    ("billing", "says"),
    [
        ("{ minimum_s = 60 }", "missing source, date"),
        ('{ granularity_s = 0, source = "https://a.example/b", date = 2026-01-15 }', "> 0"),
        ('{ minimum_s = -1, source = "https://a.example/b", date = 2026-01-15 }', ">= 0"),
        ("60", "must be {"),
    ],
)
def test_a_bad_billing_rule_is_refused(tmp_path: Path, billing: str, says: str) -> None:
    with pytest.raises(config.ConfigError, match=re.escape(says)):
        _conf(tmp_path, ENTRY + f"[substrates.prices]\nbilling = {billing}\n")


def test_the_price_tables_billing_rule_is_the_default() -> None:
    """Without a rule given, the price table's own (`prices.billing`) rounds each attempt."""
    read = date(2026, 5, 1)
    prices = Prices(
        per_instance_hour=Price(3.6, "https://example.test/prices", read),
        billing=pricing.Billing(60.0, 1.0, "https://example.test/billing", read),
    )
    got = pricing.per_successful_rollout([10.0], [], prices)
    assert got.rounding_s == pytest.approx(50.0) and got.billed_s == pytest.approx(60.0)
    assert got.worker_s == pytest.approx(10.0)  # a worker waits the lifetime, not the bill


def test_the_rule_applied_is_carried_with_the_figure() -> None:
    table = pricing.Billing(minimum_s=60, granularity_s=1, source="https://example.test/b")
    prices = Prices(vcpus=1, per_vcpu_hour=_price(0.36), billing=table)
    assert pricing.per_successful_rollout([10.0], [], prices).billing == table
    given = pricing.Billing(granularity_s=60)
    assert pricing.per_successful_rollout([10.0], [], prices, billing=given).billing == given
    assert pricing.per_successful_rollout([10.0], [], Prices()).billing == pricing.Billing()
