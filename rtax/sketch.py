"""A mergeable quantile sketch: log-spaced buckets with a fixed relative accuracy.

Why (README.md#retention): raw samples older than the retention age are folded into hourly or
daily rollups, and percentiles must survive the folding. A mean or a min/max can't give a p95
back; a histogram whose bucket edges grow geometrically can, to within `ALPHA` relative error,
and two of them merge by adding counts, so any window of buckets has its percentiles too (the
idea of DDSketch, Masson et al., VLDB 2019; written here from the paper's description).

A value x > 0 lands in bucket i = ceil(log_gamma(x)), gamma = (1 + ALPHA) / (1 - ALPHA); the
bucket's representative 2 gamma^i / (gamma + 1) is within ALPHA of every value in it. Zero and
negative values (a phase that took no time) are counted apart and read back as 0.
"""

from __future__ import annotations

import json
import math
from collections import Counter
from collections.abc import Iterable

ALPHA = 0.01
GAMMA = (1 + ALPHA) / (1 - ALPHA)
_LOG_GAMMA = math.log(GAMMA)
_ZERO = "z"


class Sketch:
    """Counts per log bucket; `quantile` reads the nearest-rank percentile back."""

    __slots__ = ("counts", "zeros")

    def __init__(self, counts: Counter[int] | None = None, zeros: int = 0) -> None:
        self.counts: Counter[int] = counts if counts is not None else Counter()
        self.zeros = zeros

    @classmethod
    def of(cls, values: Iterable[float]) -> Sketch:
        sketch = cls()
        sketch.add_all(values)
        return sketch

    @property
    def n(self) -> int:
        return self.zeros + sum(self.counts.values())

    def add_all(self, values: Iterable[float]) -> None:
        for x in values:
            if x is None or not math.isfinite(x):
                continue
            if x <= 0:
                self.zeros += 1
            else:
                self.counts[math.ceil(math.log(x) / _LOG_GAMMA)] += 1

    def merge(self, other: Sketch) -> Sketch:
        self.counts.update(other.counts)
        self.zeros += other.zeros
        return self

    def quantile(self, q: float) -> float:
        """The q-th percentile (0..100): the value at rank q/100 x (n - 1), nearest rank below,
        within ALPHA relative error; NaN when empty."""
        if not 0 <= q <= 100:
            raise ValueError(f"q must be within 0..100, got {q}")
        n = self.n
        if n == 0:
            return math.nan
        rank = q / 100 * (n - 1)
        seen = self.zeros
        if rank < seen:
            return 0.0
        for index in sorted(self.counts):
            seen += self.counts[index]
            if rank < seen:
                return 2 * GAMMA**index / (GAMMA + 1)
        return 2 * GAMMA ** max(self.counts) / (GAMMA + 1)

    def to_json(self) -> str:
        data = {str(k): v for k, v in sorted(self.counts.items())}
        if self.zeros:
            data[_ZERO] = self.zeros
        return json.dumps(data, separators=(",", ":"))

    @classmethod
    def from_json(cls, text: str | None) -> Sketch:
        if not text:
            return cls()
        data = json.loads(text)
        zeros = int(data.pop(_ZERO, 0))
        return cls(Counter({int(k): int(v) for k, v in data.items()}), zeros)
