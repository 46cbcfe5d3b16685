"""A mergeable quantile sketch: the raw values while there are few, log-spaced buckets beyond.

Why (docs/configuration.md#retention): raw samples older than the retention age are folded into
hourly or daily rollups, and percentiles must survive the folding. A mean or a min/max can't give a
p95 back; a histogram whose bucket edges grow geometrically can, to within `ALPHA` relative error,
and two of them merge by adding counts, so any window of buckets has its percentiles too (the
idea of DDSketch, Masson et al., VLDB 2019; written here from the paper's description).

One percentile rule (docs/measurement.md#statistics): `quantile` reads percentiles back with the raw
path's definition, `rtax.analysis.stats.percentile` (linear interpolation between the closest ranks,
Hyndman & Fan type 7), so history and fresh data agree on the same samples:

- **exact mode**: while a sketch holds at most `EXACT_LIMIT` samples it keeps them as they are,
  and `quantile` *is* `stats.percentile` of them (bit for bit). Merging two exact sketches stays
  exact while their total is at most `EXACT_LIMIT`; beyond, both are converted to buckets.
- **bucket mode**: x[i], the i-th smallest sample, is read as the representative of the bucket
  holding rank i (0 for the zero bucket), and the same interpolation is applied. Every
  representative is within ALPHA of the sample it stands for, and the interpolation is a convex
  combination of two of them, so the answer is within ALPHA (1%) of the raw percentile for
  positive samples, whatever their distribution.

Buckets: a value x > 0 lands in bucket i = ceil(log_gamma(x)), gamma = (1 + ALPHA) / (1 - ALPHA);
the bucket's representative 2 gamma^i / (gamma + 1) is within ALPHA of every value in it. Zero
and negative values (a phase that took no time) are counted apart and read back as 0.

Why `EXACT_LIMIT` = 256: a rollup row stores its sketch as JSON in SQLite. A float in shortest
round-trip form takes ~19 bytes, so an exact sketch is at most ~5 KB, against ~1-3.5 KB for the
buckets of lognormal samples with sigma 0.4-1.5 (130-400 buckets). Rows stay within about one
SQLite page plus an overflow page, the database still grows with groups x time buckets (not with
the probing rate), and the rollups that matter most stay exact: an hourly bucket of a plan
probing every 5 minutes holds 12 samples (~240 bytes), a daily one 288 (just past the limit).
1,024 would keep daily buckets exact too but make worst-case rows ~20 KB, 6-15x their buckets.

JSON: exact sketches are written as ``{"v": [sorted values]}``; bucket sketches keep the original
``{"<bucket>": count, ..., "z": zeros}`` form, so rollup rows written before exact mode existed
load unchanged (as bucket sketches; an empty one as an empty exact sketch).
"""

from __future__ import annotations

import bisect
import json
import math
from collections import Counter
from collections.abc import Callable, Iterable
from itertools import accumulate
from typing import Any

from rtax.analysis import stats

ALPHA = 0.01
GAMMA = (1 + ALPHA) / (1 - ALPHA)
EXACT_LIMIT = 256
_LOG_GAMMA = math.log(GAMMA)
_ZERO = "z"
_VALUES = "v"


def bucket_of(x: float) -> int:
    """The log bucket of a value x > 0."""
    return math.ceil(math.log(x) / _LOG_GAMMA)


def representative(index: int) -> float:
    """The value read back for every sample of bucket `index` (within ALPHA of each)."""
    return 2 * GAMMA**index / (GAMMA + 1)


class Sketch:
    """The raw values (`values`, while at most `EXACT_LIMIT`) or counts per log bucket
    (`values` is None); `quantile` reads percentiles back with `stats.percentile`'s rule."""

    #: `_ordered`: what `quantile` and `interval` read (the sorted values, or the bucket
    #: reader), made on the first read and dropped by any change: a Timeline point reads five
    #: percentiles of one sketch, and sorting a few hundred buckets each time was most of it.
    __slots__ = ("_ordered", "counts", "values", "zeros")

    def __init__(
        self,
        counts: Counter[int] | None = None,
        zeros: int = 0,
        values: list[float] | None = None,
    ) -> None:
        self._ordered: Any = None
        if counts is None and not zeros:
            # No buckets given: an exact sketch (of `values`, or empty).
            self.values: list[float] | None = list(values) if values is not None else []
            self.counts: Counter[int] = Counter()
            self.zeros = 0
            if len(self.values) > EXACT_LIMIT:
                self._to_buckets()
        else:
            if values is not None:
                raise ValueError("a sketch is either exact (values) or buckets (counts, zeros)")
            self.values = None
            self.counts = counts if counts is not None else Counter()
            self.zeros = zeros

    @classmethod
    def of(cls, values: Iterable[float]) -> Sketch:
        sketch = cls()
        sketch.add_all(values)
        return sketch

    @property
    def exact(self) -> bool:
        """Whether the sketch still holds its samples as they are."""
        return self.values is not None

    @property
    def n(self) -> int:
        if self.values is not None:
            return len(self.values)
        return self.zeros + sum(self.counts.values())

    def add_all(self, values: Iterable[float]) -> None:
        self._ordered = None
        for x in values:
            if x is None or not math.isfinite(x):
                continue
            if self.values is not None:
                self.values.append(float(x))
                if len(self.values) > EXACT_LIMIT:
                    self._to_buckets()
            elif x <= 0:
                self.zeros += 1
            else:
                self.counts[bucket_of(x)] += 1

    def _to_buckets(self) -> None:
        """Give up the raw values for their bucket counts (past `EXACT_LIMIT`, or on merging
        with a bucket sketch)."""
        values, self.values = self.values or [], None
        self._ordered = None
        for x in values:
            if x <= 0:
                self.zeros += 1
            else:
                self.counts[bucket_of(x)] += 1

    def merge(self, other: Sketch) -> Sketch:
        """Add `other`'s samples to this sketch (in place; returned for chaining). Exact while
        both are exact and their total is at most `EXACT_LIMIT`."""
        self._ordered = None
        if (
            self.values is not None
            and other.values is not None
            and len(self.values) + len(other.values) <= EXACT_LIMIT
        ):
            self.values.extend(other.values)
            return self
        if self.values is not None:
            self._to_buckets()
        if other.values is not None:
            self.add_all(other.values)
        else:
            self.counts.update(other.counts)
            self.zeros += other.zeros
        return self

    def quantile(self, q: float) -> float:
        """The q-th percentile (0..100) by `stats.percentile`'s rule: exact in exact mode,
        within ALPHA relative in bucket mode (see the module docstring); NaN when empty."""
        if not 0 <= q <= 100:
            raise ValueError(f"q must be within 0..100, got {q}")
        if self.values is not None:
            # np.percentile's "linear" rule through `stats.ranks` (bit for bit the same), on
            # the sorted values: a page reads thousands of small sketches, and numpy's
            # per-call overhead would be most of the time.
            if self._ordered is None:
                self._ordered = sorted(v for v in self.values if math.isfinite(v))
            ordered = self._ordered
            if not ordered:
                return math.nan
            lower, upper, weight = stats.ranks(q, len(ordered))
            return stats.lerp(ordered[lower], ordered[upper], weight)
        n = self.n
        if n == 0:
            return math.nan
        if self._ordered is None:
            self._ordered = self._reader()
        value = self._ordered
        lower, upper, weight = stats.ranks(q, n)
        return stats.lerp(value(lower), value(upper), weight)

    def _reader(self) -> Callable[[int], float]:
        """rank (0-based) -> the representative of the bucket holding that rank (bucket mode)."""
        indices = sorted(self.counts)
        # ends[k]: how many samples are at or below bucket k (the zero bucket first).
        ends = list(accumulate([self.counts[i] for i in indices], initial=self.zeros))

        def value(rank: int) -> float:
            if rank < self.zeros:
                return 0.0
            return representative(indices[bisect.bisect_right(ends, rank) - 1])

        return value

    def interval(self, q: float, level: float = stats.INTERVAL_LEVEL) -> tuple[float, float] | None:
        """The order-statistic interval of the q-th percentile (`stats.interval_ranks`), read at its
        ranks (within ALPHA in bucket mode); None where it does not hold."""
        if self.values is not None:
            return stats.quantile_interval(self.values, q, level)
        at = stats.interval_ranks(q, self.n, level)
        if at is None:
            return None
        if self._ordered is None:
            self._ordered = self._reader()
        return self._ordered(at[0]), self._ordered(at[1])

    def to_json(self) -> str:
        if self.values is not None:
            return json.dumps({_VALUES: sorted(self.values)}, separators=(",", ":"))
        data = {str(k): v for k, v in sorted(self.counts.items())}
        if self.zeros:
            data[_ZERO] = self.zeros
        return json.dumps(data, separators=(",", ":"))

    @classmethod
    def from_json(cls, text: str | None) -> Sketch:
        """Either form (see the module docstring); an empty or missing text is an empty
        exact sketch."""
        if not text:
            return cls()
        data = json.loads(text)
        if _VALUES in data:
            return cls(values=[float(v) for v in data[_VALUES]])
        zeros = int(data.pop(_ZERO, 0))
        counts = Counter({int(k): int(v) for k, v in data.items()})
        if not counts and not zeros:
            return cls()
        return cls(counts, zeros)
