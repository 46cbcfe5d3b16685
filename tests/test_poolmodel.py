"""The warm-pool model against cases worked out by hand (docs/measurement.md#warm-pool-model)."""

from __future__ import annotations

import numpy as np
import pytest

from rtax.planning import poolmodel
from rtax.planning.poolmodel import arrivals, repeats_for, simulate, waits


def test_arrivals_of_each_shape() -> None:
    assert arrivals("burst", 3) == [0.0, 0.0, 0.0]
    assert arrivals("staggered", 4, 0.25) == [0.0, 0.25, 0.5, 0.75]
    assert arrivals("sequential", 3, 12.0) == [0.0, 12.0, 24.0]
    with pytest.raises(ValueError, match="shape"):
        arrivals("wave", 3)
    with pytest.raises(ValueError, match="every_s"):
        arrivals("sequential", 3, 0.0)


def test_a_burst_beyond_the_pool_with_one_refill_at_a_time() -> None:
    """Cold time 1 s, 2 ready, 5 claims at once, R = 1: claims 3, 4, 5 wait 1, 2, 3 s.
    Latencies [0, 0, 1, 2, 3]: p50 at rank 2 = 1; p95 at rank 3.8 = 2 + 0.8 = 2.8; p99 at
    rank 3.96 = 2.96; mean wait 6 / 5."""
    got = simulate([1.0], arrivals("burst", 5), 2, 1, repeats=1)
    assert (got.p50_s, got.p95_s, got.p99_s) == pytest.approx((1.0, 2.8, 2.96))
    assert got.drain_probability == 1.0
    assert got.mean_wait_s == pytest.approx(1.2)
    assert got.n == 5


def test_percentiles_pool_every_repeat() -> None:
    """200 repeats of [0, 0, 1, 2, 3]: 1,000 latencies, 400 zeros and 200 each of 1, 2, 3.
    p50 at rank 499.5 lies among the ones; p95 at rank 949.05 and p99 among the threes."""
    got = simulate([1.0], arrivals("burst", 5), 2, 1, repeats=200)
    assert (got.p50_s, got.p95_s, got.p99_s) == (1.0, 3.0, 3.0)
    assert got.n == 1_000 and got.mean_wait_s == pytest.approx(1.2)


def test_a_refill_is_asked_for_when_a_claim_is_served_as_in_the_real_pool() -> None:
    """Cold time 1 s, 2 ready, 5 claims at once, R = 2 (= K, the most the real pool takes):
    claims 1-2 take the ready ones at 0 and their refills end at 1; claims 3-4 take those at 1
    and only then ask for theirs, which end at 2: claim 5 waits 2 s, not 1 s (the pool never
    holds more than K, so a waiting claim's refill can't start before it is served)."""
    got = simulate([1.0], arrivals("burst", 5), 2, 2, repeats=1)
    assert got.mean_wait_s == pytest.approx(4 / 5)  # [0, 0, 1, 1, 2]
    assert list(waits([1.0] * 5, [0.0] * 5, 2, 2)) == [0, 0, 1, 1, 2]
    assert list(waits([1.0] * 7, [0.0] * 7, 3, 3)) == [0, 0, 0, 1, 1, 1, 2]


def test_a_pool_large_enough_never_waits_and_costs_only_the_claim() -> None:
    got = simulate([30.0], arrivals("burst", 5), 5, 1, claim_s=0.01, repeats=3)
    assert got.drain_probability == 0.0 and got.mean_wait_s == 0.0
    assert (got.p50_s, got.p95_s, got.p99_s) == pytest.approx((0.01, 0.01, 0.01))


def test_staggered_claims_faster_than_the_refills() -> None:
    """1 ready, cold 1.5 s, a claim every 1 s. R = 1: refill k starts when refill k-1 ends, so
    claim k gets its environment at 1.5 k and waits 0.5 k. R = 2: each refill starts at its
    claim served, so with 2 ready no claim waits: the refills of claims 1 and 2 (at 0 and 1)
    are ready at 1.5 and 2.5, before claims 3 and 4 arrive."""
    times = arrivals("staggered", 4, 1.0)
    assert list(waits([1.5] * 4, times, 1, 1)) == pytest.approx([0.0, 0.5, 1.0, 1.5])
    assert list(waits([1.5] * 4, times, 2, 2)) == pytest.approx([0.0, 0.0, 0.0, 0.0])


def test_sequential_claims_wait_only_when_a_refill_outlasts_a_rollout() -> None:
    assert simulate([2.0], arrivals("sequential", 10, 3.0), 1, 1).drain_probability == 0.0
    slow = simulate([4.0], arrivals("sequential", 3, 3.0), 1, 1, repeats=1)
    # claim 2 at 3 s gets refill 1 at 4 s; claim 3 at 6 s gets refill 2 (4 -> 8 s) at 8 s
    assert slow.mean_wait_s == pytest.approx((0 + 1 + 2) / 3)


def test_claims_beyond_a_drained_pool_take_whichever_refill_is_ready_first() -> None:
    """4 ready, 4 refills at once, 8 claims at once, cold times 3, 1, 4, 2, 3, 1, 4, 2 in the
    order the claims are served. Claims 1-4 take the ready four at 0; their refills end at 3,
    1, 4, 2. Claim 5 takes the one at 1 and asks for a refill (1 + 3 = 4); claim 6 takes the
    one at 2 and asks (2 + 1 = 3); claim 7 takes the first at 3 and claim 8 the second at 3,
    one of them claim 6's own refill, faster than claim 3's."""
    cold = [3.0, 1.0, 4.0, 2.0] * 2
    assert list(waits(cold, [0.0] * 8, 4, 4)) == [0, 0, 0, 0, 1, 2, 3, 3]
    got = simulate([1.0, 2.0, 3.0, 4.0], arrivals("burst", 8), 4, 4, repeats=500, seed=3)
    assert got.p99_s == 4.0 and got.drain_probability == 1.0


def test_one_refill_at_a_time_queues_exponential_cold_starts() -> None:
    """1 ready, R = 1, a burst of 5, cold ~ Exponential(1): claim k + 1 waits the sum of k cold
    times, E = k; the mean over claims is (0 + 1 + 2 + 3 + 4) / 5 = 2."""
    cold = np.random.default_rng(7).exponential(1.0, 20_000)
    got = simulate(cold, arrivals("burst", 5), 1, 1, repeats=4_000, seed=1)
    assert got.mean_wait_s == pytest.approx(2.0, rel=0.03)


def test_measured_claim_costs_are_resampled() -> None:
    got = simulate([5.0], arrivals("burst", 50), 50, 1, claim_s=[0.001, 0.003], repeats=50)
    assert 0.001 <= got.p50_s <= 0.003 and got.p99_s == pytest.approx(0.003)
    assert got.mean_wait_s == 0.0


def test_seeded_and_order_free() -> None:
    cold = [0.5, 1.0, 4.0]
    one = simulate(cold, arrivals("staggered", 20, 0.2), 3, 2, seed=5)
    assert simulate(cold, arrivals("staggered", 20, 0.2), 3, 2, seed=5) == one
    assert simulate(cold, arrivals("staggered", 20, 0.2)[::-1], 3, 2, seed=5) == one
    assert simulate(cold, arrivals("staggered", 20, 0.2), 3, 2, seed=6) != one


def test_a_bigger_pool_never_waits_longer() -> None:
    cold = list(np.random.default_rng(2).lognormal(0.0, 0.5, 200))
    times = arrivals("burst", 30)
    means = [simulate(cold, times, k, 2, repeats=50).mean_wait_s for k in (2, 5, 10, 20, 30)]
    assert means == sorted(means, reverse=True) and means[-1] == 0.0


@pytest.mark.parametrize(
    "kwargs",
    [
        {"cold_s": []},
        {"cold_s": [-1.0]},
        {"arrivals_s": []},
        {"pool_size": -1},
        {"pool_size": 0},
        {"refill_concurrency": 0},
        {"refill_concurrency": 2},  # more than the pool of 1: the real pool refuses it too
        {"repeats": 0},
        {"claim_s": [float("nan")]},
    ],
)
def test_bad_inputs_are_refused(kwargs) -> None:
    args = {
        "cold_s": [1.0],
        "arrivals_s": [0.0],
        "pool_size": 1,
        "refill_concurrency": 1,
        "claim_s": 0.0,
        "repeats": 1,
    }
    args.update(kwargs)
    with pytest.raises(ValueError):
        simulate(**args)


def test_the_shapes_are_the_load_shapes() -> None:
    assert poolmodel.SHAPES == ("sequential", "staggered", "burst")


def test_the_cold_starts_at_the_burst_concurrency_are_read_off_the_sweep() -> None:
    """A measured level's own samples; between two, their quantile functions interpolated;
    outside the sweep, the nearest end's."""
    sweep = {1: [1.0, 1.1], 4: [2.0, 2.0, 2.0], 16: [5.0, 6.0], 32: []}
    assert poolmodel.at_concurrency(sweep, 4)[0] == 4 and list(sweep[4]) == [2.0] * 3
    level, values = poolmodel.at_concurrency(sweep, 40)
    assert level == 16 and list(values) == [5.0, 6.0]
    assert poolmodel.at_concurrency(sweep, 0.5)[0] == 1
    level, values = poolmodel.at_concurrency(sweep, 7)  # a quarter of the way from 4 to 16
    assert level == 7 and len(values) == 3
    high = np.percentile([5.0, 6.0], (np.arange(3) + 0.5) / 3 * 100)
    assert list(values) == pytest.approx(list(0.75 * 2.0 + 0.25 * high))
    with pytest.raises(ValueError, match="no measured level"):
        poolmodel.at_concurrency({8: []}, 8)


def test_a_drained_pool_works_its_refills_and_part_of_the_rollouts_they_served() -> None:
    """R refills in flight and the R rollouts of the claims they last served, busy for their
    share of a refill's time: between R and 2R environments at work at once, never more than
    the claims (the level a burst's refills are drawn at)."""
    assert poolmodel.contended_level(24, 2) == 4  # busy the whole time: the most contended
    assert poolmodel.contended_level(24, 2, busy=0.5) == 3
    assert poolmodel.contended_level(3, 2) == 3
    assert poolmodel.contended_level(50, 1, busy=0.0) == 1
    # a T0 rollout's life after its first command over its time to first command
    assert poolmodel.busy_share(0.4, 0.6) == pytest.approx(0.5)
    assert poolmodel.busy_share(0.4, 2.0) == 1.0 and poolmodel.busy_share(0.4, 0.3) == 0.0
    for bad in ((0, 1), (5, 0), (2.5, 1)):
        with pytest.raises(ValueError, match="whole numbers"):
            poolmodel.contended_level(*bad)
    with pytest.raises(ValueError, match="share"):
        poolmodel.contended_level(5, 1, busy=1.5)
    with pytest.raises(ValueError):
        poolmodel.busy_share(0.0, 1.0)


def test_large_bursts_run_fewer_repeats_within_a_claim_budget() -> None:
    # 200 repeats up to 1,000 claims; beyond, CLAIM_BUDGET claims in all, never under 20.
    assert [repeats_for(n) for n in (1, 50, 1_000, 2_000, 5_000, 100_000)] == [
        200,
        200,
        200,
        100,
        40,
        20,
    ]
    got = simulate([1.0], arrivals("burst", 5_000), 10, 10)
    assert (got.repeats, got.n) == (40, 200_000)
    # the same drains the same: a burst of 5,000 on 10 ready, refilled 10 at a time with 1 s
    # cold starts, waits 1 s per ten claims beyond the first ten
    assert got.drain_probability == 1.0
    assert got.p50_s == pytest.approx(249.5, abs=0.5)
