"""The sketch reads percentiles back with the raw path's rule (numpy's linear interpolation):
exactly while it keeps the samples, within 1% once it has buckets, and old rollup rows still load.

Every expected value here comes from `np.percentile` on the raw samples or is worked by hand,
never from the sketch's own code."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rtax.analysis import stats
from rtax.analysis.sketch import ALPHA, EXACT_LIMIT, GAMMA, Sketch

finite = st.floats(-1e6, 1e6, allow_nan=False, allow_infinity=False)
quantile = st.floats(0, 100)


# -- the rule itself ---------------------------------------------------------------------------


@given(st.lists(finite, min_size=1, max_size=200), quantile)
def test_ranks_and_lerp_are_numpys_linear_method_bit_for_bit(values: list[float], q: float) -> None:
    ordered = sorted(values)
    lower, upper, weight = stats.ranks(q, len(ordered))
    assert stats.lerp(ordered[lower], ordered[upper], weight) == float(np.percentile(values, q))


def test_ranks_hand_worked() -> None:
    assert stats.ranks(50, 4) == (1, 2, 0.5)  # h = 0.5 x 3 = 1.5
    assert stats.ranks(95, 4) == (2, 3, pytest.approx(0.85))  # h = 2.85
    assert stats.ranks(100, 4) == (3, 3, 0.0)
    assert stats.ranks(0, 1) == (0, 0, 0.0)


# -- exact mode ----------------------------------------------------------------------------------


@given(st.lists(finite, min_size=1, max_size=EXACT_LIMIT), quantile)
def test_exact_mode_equals_np_percentile(values: list[float], q: float) -> None:
    sketch = Sketch.of(values)
    assert sketch.exact
    assert sketch.quantile(q) == float(np.percentile(values, q))
    # and after a trip through a rollup row
    assert Sketch.from_json(sketch.to_json()).quantile(q) == float(np.percentile(values, q))


@given(
    st.lists(st.lists(finite, max_size=60), min_size=1, max_size=6).filter(
        lambda parts: 0 < sum(map(len, parts)) <= EXACT_LIMIT
    ),
    quantile,
)
def test_merged_exact_sketches_equal_np_percentile_of_the_union(
    parts: list[list[float]], q: float
) -> None:
    merged = Sketch()
    for part in parts:
        merged.merge(Sketch.from_json(Sketch.of(part).to_json()))
    union = [x for part in parts for x in part]
    assert merged.exact and merged.n == len(union)
    assert merged.quantile(q) == float(np.percentile(union, q))


def test_exact_up_to_the_limit_then_buckets() -> None:
    values = [float(i + 1) for i in range(EXACT_LIMIT)]
    assert Sketch.of(values).exact
    assert not Sketch.of([*values, 1.0]).exact
    half = Sketch.of(values[: EXACT_LIMIT // 2 + 1])
    assert not half.merge(Sketch.of(values[: EXACT_LIMIT // 2])).exact  # the total decides
    assert half.n == EXACT_LIMIT + 1


def test_hand_worked_interpolation() -> None:
    # samples [1, 1, 1, 10]: p50 at rank 1.5 -> 1; p95 at rank 2.85 -> 1 + 0.85 x 9 = 8.65
    sketch = Sketch.of([10.0, 1.0, 1.0, 1.0])
    assert sketch.quantile(50) == 1.0
    assert sketch.quantile(95) == pytest.approx(8.65, rel=1e-12)
    # the nearest rank below (the old rule) would say 1.0 for p95


def test_non_finite_values_are_ignored_and_empty_is_nan() -> None:
    assert Sketch.of([math.nan, math.inf, 2.0, None]).n == 1  # type: ignore[list-item]
    assert math.isnan(Sketch().quantile(50))
    with pytest.raises(ValueError):
        Sketch.of([1.0]).quantile(101)


def test_json_keeps_every_bit() -> None:
    values = [0.1, 1 / 3, 1e-300, -0.0, 12345.678901234567]
    assert Sketch.from_json(Sketch.of(values).to_json()).values == sorted(values)


# -- bucket mode ---------------------------------------------------------------------------------


def test_bucket_mode_interpolates_across_a_gap() -> None:
    # 150 samples of 1 s and 150 of 100 s: p50 sits at rank 149.5, halfway between 1 and 100.
    values = [1.0] * 150 + [100.0] * 150
    sketch = Sketch.of(values)
    assert not sketch.exact
    assert float(np.percentile(values, 50)) == 50.5
    assert sketch.quantile(50) == pytest.approx(50.5, rel=ALPHA)  # nearest rank below said ~1


@settings(max_examples=60, deadline=None)
@given(
    sigma=st.floats(0.5, 1.5),
    n=st.integers(1_000, 5_000),
    parts=st.integers(2, 8),
    seed=st.integers(0, 2**32 - 1),
)
def test_lognormal_merged_from_several_sketches_within_one_percent(
    sigma: float, n: int, parts: int, seed: int
) -> None:
    rng = np.random.default_rng(seed)
    values = rng.lognormal(np.log(0.5), sigma, n)
    cuts = np.sort(rng.integers(0, n, parts - 1))
    merged = Sketch()
    for part in np.split(values, cuts):
        merged.merge(Sketch.from_json(Sketch.of(part.tolist()).to_json()))
    assert merged.n == n and not merged.exact
    for q in (50, 95):
        assert merged.quantile(q) == pytest.approx(float(np.percentile(values, q)), rel=0.01)


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), n=st.integers(EXACT_LIMIT + 1, 2_000), q=quantile)
def test_bucket_mode_is_within_alpha_for_any_positive_samples(seed: int, n: int, q: float) -> None:
    rng = np.random.default_rng(seed)
    # a mixture with far-apart modes and exact duplicates, the hard case for interpolation
    third = n // 3
    values = np.concatenate(
        [rng.uniform(1e-4, 1e-3, third), rng.lognormal(2, 2, third), np.full(n - 2 * third, 7.0)]
    )
    assert Sketch.of(values.tolist()).quantile(q) == pytest.approx(
        float(np.percentile(values, q)), rel=ALPHA * 1.0001
    )


@settings(deadline=None)
@given(st.lists(st.floats(0, 1e4), min_size=1, max_size=600), quantile, quantile)
def test_monotone_in_q(values: list[float], q1: float, q2: float) -> None:
    sketch = Sketch.of(values)
    lo, hi = sorted((q1, q2))
    a, b = sketch.quantile(lo), sketch.quantile(hi)
    assert a <= b or math.isclose(a, b, rel_tol=1e-12)  # numpy's lerp can differ by an ulp


@given(st.lists(st.floats(0, 100), max_size=200), st.lists(st.floats(0, 100), max_size=200))
def test_merge_depends_only_on_the_union(a: list[float], b: list[float]) -> None:
    merged = Sketch.of(a).merge(Sketch.of(b))
    union = Sketch.of(a + b)
    assert merged.exact == union.exact == (len(a) + len(b) <= EXACT_LIMIT)
    if union.exact:
        assert sorted(merged.values or []) == sorted(union.values or [])
    else:
        assert (merged.counts, merged.zeros) == (union.counts, union.zeros)
    round_trip = Sketch.from_json(merged.to_json())
    assert round_trip.n == union.n
    assert round_trip.quantile(50) == pytest.approx(union.quantile(50), nan_ok=True)


# -- rows written before exact mode --------------------------------------------------------------

#: What the bucket-only sketch wrote for the samples [0, 1, 1, 2]: 1 s is in bucket 0, 2 s in
#: bucket ceil(ln 2 / ln GAMMA) = 35, and one zero.
OLD_ROW = '{"0":2,"35":1,"z":1}'


def test_old_bucket_rows_still_load() -> None:
    old = Sketch.from_json(OLD_ROW)
    assert not old.exact and old.n == 4 and old.zeros == 1
    one = 2 / (GAMMA + 1)  # the representative of bucket 0, ~0.990
    assert old.quantile(50) == pytest.approx(one, rel=1e-12)  # ranks 1 and 2: both bucket 0
    assert old.quantile(25) == pytest.approx(0.75 * one, rel=1e-12)  # 0 + 0.75 x (one - 0)
    assert old.quantile(100) == pytest.approx(2.0, rel=ALPHA)
    # every reading is within 1% of the raw samples' percentile
    for q in (25, 50, 95, 100):
        assert old.quantile(q) == pytest.approx(np.percentile([0, 1, 1, 2], q), rel=ALPHA)
    # merging fresh exact data into an old row gives buckets holding both
    merged = Sketch.from_json(OLD_ROW).merge(Sketch.of([2.0, 0.0]))
    assert not merged.exact and merged.n == 6 and merged.counts[35] == 2 and merged.zeros == 2
    assert Sketch.from_json(merged.to_json()).counts == merged.counts


def test_old_empty_row_is_an_empty_exact_sketch() -> None:
    empty = Sketch.from_json("{}")
    assert empty.exact and empty.n == 0
    assert empty.merge(Sketch.of([3.0, 1.0])).quantile(50) == 2.0  # still exact
    assert Sketch.from_json(None).exact
