"""The detection evaluation: the shipped detection and incident rules replayed over labelled
series shaped like real latency, and over real series recorded here (docs/alerts.md#evaluation).

Why (the lesson of the last round): a detector is trusted only on the data it will meet.
Latency is bimodal, autocorrelated, heavy-tailed and cyclic, and a method tried on i.i.d.
lognormal samples alone (the one case a log transform makes Gaussian) cried wolf several times
a day on the others. Each family here is seeded, so a figure is the same on every run; the
replay is `rtax.analysis.replay`, the code path the scheduler alerts with.

- A **stationary** family has no change at all: every incident on it is false. Figure: false
  incidents per 1,000 samples, and per series-month at the shipped probe interval.
  Target: at most `FALSE_TARGET` per 1,000 (about one per series a month at one probe every
  5 minutes).
- A **change** family has `PRE` stationary samples (a full window), then its change: figures
  are the share of trials with an incident after the change (within `POST` samples, and within
  10) and the delay in samples (the n-th changed sample is delay n).

The body of every synthetic family is lognormal with σ = `SIGMA` on the log scale (p95 / p50 =
1.28), 1.5 times the spread of the noisiest real T0 series recorded here (gVisor, 0.10).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

import numpy as np

from rtax.analysis.replay import Incident, Recording, replay
from rtax.analysis.rules import Detection, Rule

SIGMA = 0.15
#: Stationary samples before a change (the window full of the old level) and after it.
PRE, POST = 200, 100
#: The stationary target: false incidents per 1,000 samples.
FALSE_TARGET = 0.12
#: A 1.5x step: the share of trials detected within 10 samples.
STEP_TARGET = 0.95
#: Success 100 % -> 50 %: the median delay in samples.
DROP_TARGET = 5
#: Samples per day at the shipped 5-minute interval (the daily cycle's period).
DAY = 288

Make = Callable[[np.random.Generator, int], tuple[np.ndarray, np.ndarray]]


@dataclass(frozen=True)
class Family:
    """A labelled series family: `make(rng, n)` gives n (latency, ok) samples; a change
    family's change begins at sample `PRE`. `target` names the acceptance it is held to."""

    name: str
    make: Make
    change: bool = False
    target: str | None = None


def _lognormal(rng: np.random.Generator, n: int, sigma: float = SIGMA) -> np.ndarray:
    return np.exp(rng.normal(0.0, sigma, n))


def _ok(n: int) -> np.ndarray:
    return np.ones(n, dtype=bool)


def bimodal(fraction: float, slower: float) -> Make:
    """A share `fraction` of the samples `slower` times slower, at random (a cold cache, a
    noisy neighbour)."""

    def make(rng: np.random.Generator, n: int) -> tuple[np.ndarray, np.ndarray]:
        x = _lognormal(rng, n)
        x[rng.random(n) < fraction] *= slower
        return x, _ok(n)

    return make


def ar1(phi: float) -> Make:
    """Log latency an AR(1) process with coefficient `phi` and marginal σ = `SIGMA` (a host
    whose load wanders slowly)."""

    def make(rng: np.random.Generator, n: int) -> tuple[np.ndarray, np.ndarray]:
        noise = rng.normal(0.0, SIGMA * math.sqrt(1 - phi**2), n)
        y = np.empty(n)
        y[0] = rng.normal(0.0, SIGMA)
        for i in range(1, n):
            y[i] = phi * y[i - 1] + noise[i]
        return np.exp(y), _ok(n)

    return make


def pareto(alpha: float) -> Make:
    """A Pareto tail of index `alpha` (scale 1): a heavy right tail, infinite variance."""

    def make(rng: np.random.Generator, n: int) -> tuple[np.ndarray, np.ndarray]:
        return 1.0 + rng.pareto(alpha, n), _ok(n)

    return make


def daily(amplitude: float) -> Make:
    """A daily cycle: the level times exp(`amplitude` · sin), one period a day at one probe
    every 5 minutes, at a random phase."""

    def make(rng: np.random.Generator, n: int) -> tuple[np.ndarray, np.ndarray]:
        t = np.arange(n) + rng.integers(DAY)
        return _lognormal(rng, n) * np.exp(amplitude * np.sin(2 * np.pi * t / DAY)), _ok(n)

    return make


def failing(rate: float) -> Make:
    """Sporadic failures at `rate`, at random (the Docker exec race loses about one command's
    output in a few hundred here)."""

    def make(rng: np.random.Generator, n: int) -> tuple[np.ndarray, np.ndarray]:
        return _lognormal(rng, n), rng.random(n) >= rate

    return make


def step(ratio: float, sigma: float = SIGMA) -> Make:
    """The level times `ratio` from sample `PRE` on."""

    def make(rng: np.random.Generator, n: int) -> tuple[np.ndarray, np.ndarray]:
        x = _lognormal(rng, n, sigma)
        x[PRE:] *= ratio
        return x, _ok(n)

    return make


def spread(factor: float) -> Make:
    """The same median, the log-scale spread times `factor` from sample `PRE` on."""

    def make(rng: np.random.Generator, n: int) -> tuple[np.ndarray, np.ndarray]:
        z = rng.normal(0.0, SIGMA, n)
        z[PRE:] *= factor
        return np.exp(z), _ok(n)

    return make


def drift(total: float, over: int) -> Make:
    """The level rising steadily from sample `PRE` to `total` times it `over` samples later."""

    def make(rng: np.random.Generator, n: int) -> tuple[np.ndarray, np.ndarray]:
        ramp = np.clip((np.arange(n) - PRE) / over, 0.0, 1.0)
        return _lognormal(rng, n) * total**ramp, _ok(n)

    return make


def success_drop(after: float) -> Make:
    """Every rollout succeeding, then a share `after` from sample `PRE` on."""

    def make(rng: np.random.Generator, n: int) -> tuple[np.ndarray, np.ndarray]:
        ok = _ok(n)
        ok[PRE:] = rng.random(n - PRE) < after
        return _lognormal(rng, n), ok

    return make


FAMILIES: tuple[Family, ...] = (
    Family("lognormal", lambda rng, n: (_lognormal(rng, n), _ok(n)), target="false"),
    Family("bimodal: 10 % 3x slower", bimodal(0.10, 3.0), target="false"),
    Family("bimodal: 20 % 2x slower", bimodal(0.20, 2.0), target="false"),
    Family("AR(1) phi 0.5", ar1(0.5), target="false"),
    Family("AR(1) phi 0.8", ar1(0.8), target="false"),
    Family("Pareto alpha 1.5", pareto(1.5), target="false"),
    Family("daily cycle +-10 %", daily(0.10), target="false"),
    Family("sporadic failures 1 %", failing(0.01), target="false"),
    Family("step 1.25x", step(1.25), change=True),
    Family("step 1.5x", step(1.5), change=True, target="step"),
    Family("step 2x", step(2.0), change=True),
    Family("step 3x", step(3.0), change=True),
    Family("step 1.5x at sigma 0.3", step(1.5, 0.3), change=True),
    Family("spread only 3x", spread(3.0), change=True),
    Family("drift to 2x over 200", drift(2.0, 200), change=True),
    Family("success 100 % -> 90 %", success_drop(0.9), change=True),
    Family("success 100 % -> 50 %", success_drop(0.5), change=True, target="drop"),
)


@dataclass(frozen=True)
class Row:
    """One line of the table: a family's figures and its verdict (None: no target)."""

    family: str
    change: bool
    series: int
    samples: int
    incidents: int
    per_1000: float | None = None
    per_month: float | None = None
    detected: float | None = None
    within_10: float | None = None
    within_5: float | None = None
    delay_p50: float | None = None
    delay_p95: float | None = None
    target: str = ""
    meets: bool | None = None


def stationary_row(
    name: str,
    found: Sequence[Sequence[Incident]],
    samples: int,
    interval_s: float,
    target: bool = True,
) -> Row:
    """The figures of stationary series: every incident is false."""
    incidents = sum(len(f) for f in found)
    per_1000 = 1000.0 * incidents / samples if samples else math.nan
    per_month = per_1000 / 1000.0 * (30 * 86_400 / interval_s)
    return Row(
        name, False, len(found), samples, incidents, per_1000=per_1000, per_month=per_month,
        target=f"<= {FALSE_TARGET} / 1,000" if target else "",
        meets=per_1000 <= FALSE_TARGET if target else None,
    )  # fmt: skip


def change_row(name: str, found: Sequence[Sequence[Incident]], target: str | None) -> Row:
    """The figures of change trials: the first incident opened after the change."""
    delays = []
    for trial in found:
        after = [i.opened_at for i in trial if i.opened_at >= PRE]
        delays.append(min(after) - PRE + 1 if after else None)
    got = np.array([d for d in delays if d is not None], dtype=float)
    n = len(delays)
    row = Row(
        name, True, n, n * (PRE + POST), sum(len(t) for t in found),
        detected=len(got) / n,
        within_10=float(np.sum(got <= 10)) / n,
        within_5=float(np.sum(got <= 5)) / n,
        delay_p50=float(np.median(got)) if len(got) else None,
        delay_p95=float(np.percentile(got, 95)) if len(got) else None,
    )  # fmt: skip
    if target == "step":
        return _held(row, f">= {STEP_TARGET:.0%} within 10", row.within_10 >= STEP_TARGET)
    if target == "drop":
        p50 = row.delay_p50 if row.delay_p50 is not None else math.inf
        return _held(row, f"delay p50 <= {DROP_TARGET}", p50 <= DROP_TARGET and row.detected == 1)
    return row


def _held(row: Row, target: str, meets: bool) -> Row:
    return Row(**{**row.__dict__, "target": target, "meets": meets})


def run_family(
    family: Family,
    rules: Sequence[Rule],
    detection: Detection,
    *,
    series: int,
    length: int,
    trials: int,
    seed: int = 0,
    interval_s: float = 300.0,
) -> Row:
    """A family's row: `series` stationary series of `length` samples, or `trials` change
    trials of `PRE` + `POST` samples, each seeded from `seed` and its index."""
    found = []
    count = trials if family.change else series
    n = PRE + POST if family.change else length
    for i in range(count):
        rng = np.random.default_rng([seed, i, _digest(family.name)])
        latency, ok = family.make(rng, n)
        recording = Recording.synthetic(latency, ok, interval_s=interval_s)
        found.append(replay(recording, rules, detection))
    if family.change:
        return change_row(family.name, found, family.target)
    return stationary_row(
        family.name, found, series * length, interval_s, family.target is not None
    )


def _digest(name: str) -> int:
    """A stable number per family name (Python's hash() changes between runs)."""
    return int.from_bytes(name.encode()[:16].ljust(16, b"\0"), "little") % (2**32)


def table(rows: Iterable[Row]) -> list[str]:
    """The evaluation's table as lines: stationary families with their false incidents, change
    families with detection and delay, each with its target and MEETS / MISSES."""
    lines = [
        f"{'family':<34} {'series':>6} {'samples':>9} {'incidents':>9}  "
        f"{'per 1,000':>9} {'per month':>9}  target / verdict"
    ]
    changes = [
        f"{'family':<34} {'trials':>6} {'detected':>9} {'<= 10':>6} {'<= 5':>6} "
        f"{'delay p50':>9} {'p95':>5}  target / verdict"
    ]
    for row in rows:
        verdict = "" if row.meets is None else ("meets target" if row.meets else "MISSES target")
        tail = f"  {row.target}: {verdict}" if row.target else ""
        if row.change:
            changes.append(
                f"{row.family:<34} {row.series:>6} {row.detected:>9.0%} {row.within_10:>6.0%} "
                f"{row.within_5:>6.0%} {_n(row.delay_p50):>9} {_n(row.delay_p95):>5}{tail}"
            )
        else:
            lines.append(
                f"{row.family:<34} {row.series:>6} {row.samples:>9,} {row.incidents:>9}  "
                f"{row.per_1000:>9.3f} {row.per_month:>9.2f}{tail}"
            )
    return [*lines, "", *changes]


def _n(value: float | None) -> str:
    return "-" if value is None else f"{value:g}"
