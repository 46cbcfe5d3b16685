"""The coverage simulation behind the step time's interval (docs/measurement.md, tail-aware
step time): latency families a fleet meets (lognormal, Pareto, bimodal), their true E[max of n],
and how often `rtax.planning.steptime`'s interval holds it. `python tests/stepcoverage.py
[trials]` prints the docs' table; tests/test_makespan.py asserts it.

Why these families: latency is right-skewed (lognormal σ 0.5 and 1.0), sometimes heavy-tailed
with a finite variance (Pareto α 2.5) and often bimodal (a fast path and a slow one: 70 % near
1 s, 30 % near 3 s); a method checked on one textbook distribution only is not checked.

Each trial draws m rollout times, fits them once (`steptime.fit`, as the page does) and reads
the interval for every B·G from that one fit; a trial is seeded by its family, m and index."""

from __future__ import annotations

import math
import os
import sys
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from functools import cache

import numpy as np

from rtax.planning import steptime

FAMILIES = ("lognormal σ 0.5", "lognormal σ 1.0", "Pareto α 2.5", "bimodal")
SAMPLES = (100, 300, 1_000, 3_000)
STEPS = (64, 256, 1_024, 4_096)
_erf = np.frompyfunc(math.erf, 1, 1)


def _phi(z: np.ndarray) -> np.ndarray:
    return 0.5 * (1.0 + np.asarray(_erf(z / math.sqrt(2.0)), dtype=float))


def _cdf(family: str, x: np.ndarray) -> np.ndarray:
    lx = np.log(x)
    if family == "lognormal σ 0.5":
        return _phi(lx / 0.5)
    if family == "lognormal σ 1.0":
        return _phi(lx)
    if family == "bimodal":
        return 0.7 * _phi(lx / 0.25) + 0.3 * _phi((lx - math.log(3.0)) / 0.25)
    raise KeyError(family)


def draw(family: str, rng: np.random.Generator, size: int) -> np.ndarray:
    """`size` rollout times from `family` (seconds)."""
    if family == "lognormal σ 0.5":
        return rng.lognormal(0.0, 0.5, size)
    if family == "lognormal σ 1.0":
        return rng.lognormal(0.0, 1.0, size)
    if family == "Pareto α 2.5":
        return 1.0 + rng.pareto(2.5, size)
    fast = rng.random(size) < 0.7
    return np.where(fast, rng.lognormal(0.0, 0.25, size), rng.lognormal(math.log(3.0), 0.25, size))


@cache
def true_max(family: str, n: int) -> float:
    """E[max of n] of `family`: closed form for the Pareto (n B(n, 1 - 1/α)), else
    ∫ (1 - F(x)^n) dx on a fine log-spaced grid."""
    if family == "Pareto α 2.5":
        a = 2.5
        return math.exp(math.lgamma(n + 1) + math.lgamma(1 - 1 / a) - math.lgamma(n + 1 - 1 / a))
    x = np.geomspace(1e-4, 1e4, 400_000)
    return float(x[0] + np.trapezoid(1.0 - _cdf(family, x) ** n, x))


@dataclass(frozen=True)
class Cell:
    """One family x m x B·G: how often the interval held the truth, how wide it was (median
    high / low), the estimate's median error, and whether the page shows the interval."""

    coverage: float
    width: float
    bias: float
    shown: bool


def cells(family: str, m: int, trials: int) -> dict[int, Cell]:
    """Every B·G's cell for samples of `m` from `family`, over `trials` seeded trials."""
    truth = {n: true_max(family, n) for n in STEPS}
    held = {n: 0 for n in STEPS}
    widths: dict[int, list[float]] = {n: [] for n in STEPS}
    errors: dict[int, list[float]] = {n: [] for n in STEPS}
    for trial in range(trials):
        rng = np.random.default_rng([FAMILIES.index(family), m, trial])
        fitted = steptime.fit(draw(family, rng, m), seed=trial)
        for n in STEPS:
            values = steptime.expected(fitted, n)
            low, high = steptime.bootstrap_range(values)
            held[n] += low <= truth[n] <= high
            widths[n].append(high / low)
            errors[n].append(values[0] / truth[n] - 1)
    shown = steptime.interval_holds(m) is None
    return {
        n: Cell(held[n] / trials, float(np.median(widths[n])), float(np.median(errors[n])), shown)
        for n in STEPS
    }


def table(trials: int) -> dict[tuple[str, int, int], Cell]:
    """Every family x m x B·G cell, the (family, m) pairs split over the cores."""
    pairs = [(family, m) for family in FAMILIES for m in SAMPLES]
    workers = max(1, min(len(pairs), os.cpu_count() or 1))
    with ProcessPoolExecutor(max_workers=workers) as pool:
        done = pool.map(cells, *zip(*pairs, strict=True), [trials] * len(pairs))
        return {
            (family, m, n): cell
            for (family, m), found in zip(pairs, done, strict=True)
            for n, cell in found.items()
        }


def markdown(found: dict[tuple[str, int, int], Cell]) -> str:
    """The docs' table: coverage (median width high/low) per cell, the hidden ones marked."""
    lines = [
        "| family | m | " + " | ".join(f"B·G = {n:,}" for n in STEPS) + " |",
        "|---|---|" + "---|" * len(STEPS),
    ]
    for family in FAMILIES:
        for m in SAMPLES:
            row = []
            for n in STEPS:
                c = found[(family, m, n)]
                text = f"{c.coverage:.1%} (×{c.width:.2f}, {c.bias:+.1%})"
                row.append(text if c.shown else f"*{text}* extrapolated")
            lines.append(f"| {family} | {m:,} | " + " | ".join(row) + " |")
    return "\n".join(lines)


if __name__ == "__main__":
    print(markdown(table(int(sys.argv[1]) if len(sys.argv) > 1 else 400)))
