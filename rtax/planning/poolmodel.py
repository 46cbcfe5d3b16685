"""The warm-pool model: claim latency of a pool of K ready environments, pure and seeded.

Why a model (docs/measurement.md#warm-pool-model): a warm pool cuts the latency of getting an
environment from a cold start to a claim, but only while it holds a ready environment; a burst
larger than the pool drains it, and the claims beyond it wait for refills. How long they wait
depends on the cold-start distribution, the pool size, how many refills run at once and the
shape of the load. The model predicts that from rtax's own measured cold starts, so a planner can
size a pool before building it, and the prediction can be checked against a real pool (the docker
pool under a burst, `make bench`).

The semantics, which a real pool must share for the two to be compared:

- **Start.** At t = 0 the pool holds `pool_size` (K) ready environments.
- **A claim** arriving at time a takes one ready environment if there is one; its latency is the
  claim cost (`claim_s`, the measured hand-over of a ready environment, 0 by default).
- **A claim's slot is refilled once the claim takes its environment** (not at its arrival):
  ready + being made + asked for = K at every moment, as in the real pool, which never holds
  more than K environments. So a refill is asked for at the moment a claim is served; one that
  waited on an empty pool asks for its replacement only then. (The model used to ask at each
  arrival, as if the pool could hold K + the claims waiting: for K = 2, R = 8 and a burst of 50
  that predicted a mean wait of 3.6 s where the real pool's rule gives 13.1 s.)
- **Refill concurrency** R, 1 <= R <= K (what the real pool accepts): at most R environments
  are being created at once; requests beyond R wait in FIFO order and start when a creation
  ends. Each creation takes one cold-start sample, drawn with replacement from `cold_s` (the
  time from the create request to the environment's first command, ``time_to_first_command``).
- **An empty pool**: the claimer never starts a cold create of its own; it waits, in FIFO order
  of arrival, for the next environment that becomes ready. Its latency is that wait plus the
  claim cost.
- **Contention** is in the samples, not in the rules: refills made during a burst are slower
  than quiet ones on the same machine (the burst's own rollouts and removals share it). Fed
  the cold starts measured at the concurrency a drained pool's refills run at
  (`contended_level`: the R refills in flight and, for the share of that time they are busy,
  the rollouts of the R claims they last served; `at_concurrency` reads them out of an
  earlier `rtax burst` sweep, the Capacity page's points, between two measured levels by
  interpolation), the model forecasts a burst from data recorded before it; fed quiet cold
  starts, it forecasts a quiet pool (benchmarks/bench_pool.py prints both beside the measured
  burst). Not the burst's size: its claims wait, they don't create; a sweep at 24 at once
  (4.6 s) forecast a burst of 24 on a pool refilled 2 at a time at +300 %.

Claims are served in arrival order, each taking the earliest-ready environment there is.
Worked by hand: constant cold time c, K ready, N > K claims at t = 0 and R = 1: the k-th claim
beyond K waits k × c; with R = K, the claims beyond K are served K at a time, the j-th group
waiting j × c.

Percentiles pool the claims of every repeat (one distribution of a claim's latency) and use the
one definition of rtax.analysis.stats (linear interpolation). `drain_probability` is the share of
repeats in which at least one claim waited. The repeats are 200 up to a burst of 1,000 claims
and then as many as 200,000 simulated claims allow (`repeats_for`; 40 for the page's largest
burst of 5,000), so a slider move stays within a second.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from rtax.core.checks import is_whole

#: The load shapes (the same names as `rtax burst`'s plans).
SHAPES = ("sequential", "staggered", "burst")


@dataclass(frozen=True)
class PoolPrediction:
    """Claim latency (seconds) over every simulated claim, and how often the pool ran dry."""

    p50_s: float
    p95_s: float
    p99_s: float
    #: the share of repeats in which at least one claim found the pool empty and waited
    drain_probability: float
    #: mean wait for an environment over every claim (claims that waited none count as 0)
    mean_wait_s: float
    #: claims simulated: len(arrivals) x repeats
    n: int
    #: the seeded runs of the pool they came from (`repeats_for` unless the caller chose)
    repeats: int = 0


#: The most claims `simulate` draws by default, over all its repeats: the loop over claims is
#: pure Python (two heaps, ~1 µs a claim), so 200 repeats of the Projection page's largest burst
#: (5,000 claims) took 1.2 s of a slider move's 1 s (benchmarks/bench_browser.py).
CLAIM_BUDGET = 200_000
#: ... and the fewest repeats it runs: the chance of draining is a share of repeats.
MIN_REPEATS = 20


def repeats_for(claims: int) -> int:
    """The default repeats for a run of `claims`: 200 up to 1,000 claims, then as many as
    `CLAIM_BUDGET` allows, never fewer than `MIN_REPEATS` (a burst of 5,000: 40 repeats,
    200,000 claims, which still put a p99 on 2,000 claims beyond it)."""
    return max(MIN_REPEATS, min(200, CLAIM_BUDGET // max(int(claims), 1)))


def arrivals(shape: str, n: int, every_s: float = 0.0) -> list[float]:
    """Claim times (seconds from the first) of `n` claims of a load shape.

    - ``burst``: all n at t = 0 (`every_s` is ignored);
    - ``staggered``: one every `every_s` seconds (N launches every M ms: every_s = M / 1000);
    - ``sequential``: one at a time, each when the previous rollout ended: pass the time one
      rollout holds its environment (e.g. its mean episode) as `every_s`. The model does not
      feed a claim's own wait back into the next arrival.
    """
    if shape not in SHAPES:
        raise ValueError(f"shape must be one of {', '.join(SHAPES)}, got {shape!r}")
    if n < 0:
        raise ValueError("n must be >= 0")
    if shape == "burst":
        return [0.0] * n
    if not math.isfinite(every_s) or every_s < 0 or (shape == "sequential" and every_s <= 0):
        raise ValueError(f"every_s must be a finite number of seconds > 0 for {shape}")
    return [i * every_s for i in range(n)]


def _samples(values: Sequence[float] | float, name: str) -> np.ndarray:
    arr = np.atleast_1d(np.asarray(values, dtype=float))
    if arr.size == 0:
        raise ValueError(f"{name} needs at least one sample")
    if not np.all(np.isfinite(arr)) or np.any(arr < 0):
        raise ValueError(f"{name} must be finite seconds >= 0")
    return arr


def waits(
    cold_s: Sequence[float], arrivals_s: Sequence[float], pool_size: int, refill_concurrency: int
) -> np.ndarray:
    """The wait of each claim (in sorted arrival order) for one run of the pool, with the cold
    times `cold_s` taken in order by the refills (one per claim, in the order the claims are
    served): the deterministic core of `simulate`, which draws `cold_s` from the measured
    samples. A loop over the claims with two heaps: the environments not yet taken (when each
    is ready) and the refill workers (when each is next free)."""
    times = np.sort(np.asarray(arrivals_s, dtype=float))
    creations = np.asarray(cold_s, dtype=float)
    if len(creations) != len(times):
        raise ValueError("one cold time per claim")
    ready = [0.0] * pool_size  # a heap: when each environment not yet claimed is ready
    free = [0.0] * refill_concurrency  # a heap: when each refill worker is next free
    out = np.empty_like(times)
    # heapreplace pops the earliest and pushes its successor in one sift (half a pop's and a
    # push's work): the environment claimed is replaced by its refill, the worker by its next
    # free moment.
    for i, (asked, took) in enumerate(zip(times.tolist(), creations.tolist(), strict=True)):
        served = max(asked, ready[0])
        out[i] = served - asked
        done = max(served, free[0]) + took  # its slot's refill, asked for now
        heapq.heapreplace(free, done)
        heapq.heapreplace(ready, done)
    return out


def busy_share(time_to_first_command_s: float, wall_s: float) -> float:
    """How busy a served claim keeps the machine while the next refill is made, as a share of
    one more environment: a rollout's life after its first command (its commands and its
    removal, ``wall - time_to_first_command``) over the time to make one (its time to first
    command), at most 1. From the substrate's quiet cold rollouts, recorded before any burst."""
    if not (time_to_first_command_s > 0 and math.isfinite(wall_s)):
        raise ValueError("time to first command must be > 0 s and the wall time finite")
    return min(max((wall_s - time_to_first_command_s) / time_to_first_command_s, 0.0), 1.0)


def contended_level(claims: int, refill_concurrency: int, busy: float = 1.0) -> float:
    """The number of environments at work at once while a drained pool serves a burst of
    `claims`: its R refills being made, and beside each the rollout of the claim it last
    served, which runs and is removed while the next refill is made, busy for `busy` of that
    time (`busy_share`; 1: the whole time, the most contended reading); never more than the
    claims. The concurrency whose measured cold starts the refills are drawn from.

    Why R x (1 + busy) and not the burst's size or 2R: a sweep's level c starts c cold
    rollouts at once, each making its environment through its first command, so its time to
    first command is c environments being made together; a drained pool makes R while the R
    it served run on for only part of that time. 2R (busy 1) forecast the Docker bench's
    burst 11-35 % high (issue 24)."""
    if not is_whole(claims, low=1) or not is_whole(refill_concurrency, low=1):
        raise ValueError("claims and refill_concurrency must be whole numbers >= 1")
    if not 0.0 <= busy <= 1.0:
        raise ValueError("busy must be a share within 0..1")
    return min(float(claims), refill_concurrency * (1.0 + busy))


def at_concurrency(
    sweep: Mapping[int, Sequence[float]], concurrency: float
) -> tuple[float, np.ndarray]:
    """The cold starts at `concurrency` out of a sweep {concurrency: samples}: a measured
    level's own samples, between two measured levels their quantile functions interpolated
    linearly (the level's share of the way from one to the other), outside the sweep the
    nearest end's samples; and the level they stand for. What the pool's refills take under a
    burst (`contended_level`)."""
    levels = sorted(level for level, values in sweep.items() if len(values))
    if not levels:
        raise ValueError("the sweep has no measured level")
    if concurrency <= levels[0] or concurrency >= levels[-1] or concurrency in levels:
        level = min(levels, key=lambda c: abs(c - concurrency))
        return float(level), _samples(sweep[level], f"cold starts at concurrency {level}")
    below = max(c for c in levels if c < concurrency)
    above = min(c for c in levels if c > concurrency)
    low = np.sort(_samples(sweep[below], f"cold starts at concurrency {below}"))
    high = np.sort(_samples(sweep[above], f"cold starts at concurrency {above}"))
    size = max(low.size, high.size)
    grid = (np.arange(size) + 0.5) / size * 100.0
    weight = (concurrency - below) / (above - below)
    mixed = (1 - weight) * np.percentile(low, grid) + weight * np.percentile(high, grid)
    return float(concurrency), mixed


def simulate(
    cold_s: Sequence[float],
    arrivals_s: Sequence[float],
    pool_size: int,
    refill_concurrency: int,
    *,
    claim_s: Sequence[float] | float = 0.0,
    repeats: int | None = None,
    seed: int = 0,
) -> PoolPrediction:
    """Claim latency percentiles and the chance of draining for a pool of `pool_size` ready
    environments, refilled `refill_concurrency` at a time, under claims at `arrivals_s` (see
    the module docstring for the semantics). Cold times (and claim costs, if a list) are drawn
    with replacement from the measured samples with a seeded generator, `repeats` times
    (default `repeats_for` the number of claims)."""
    cold = _samples(cold_s, "cold_s")
    claim = _samples(claim_s, "claim_s")
    times = np.asarray(arrivals_s, dtype=float)
    if times.size == 0:
        raise ValueError("arrivals_s needs at least one claim")
    if not np.all(np.isfinite(times)) or np.any(times < 0):
        raise ValueError("arrivals_s must be finite seconds >= 0")
    if not is_whole(pool_size, low=1):
        raise ValueError("pool_size must be a whole number >= 1 (the real pool's bound)")
    if not is_whole(refill_concurrency, low=1) or refill_concurrency > pool_size:
        raise ValueError("refill_concurrency must be a whole number from 1 to pool_size")
    if repeats is None:
        repeats = repeats_for(times.size)
    if repeats < 1:
        raise ValueError("repeats must be >= 1")
    rng = np.random.default_rng(seed)
    n = times.size
    every_wait = np.empty((repeats, n))
    for r in range(repeats):
        every_wait[r] = waits(rng.choice(cold, n), times, pool_size, refill_concurrency)
    latency = every_wait + rng.choice(claim, (repeats, n))
    p50, p95, p99 = np.percentile(latency, (50, 95, 99))
    return PoolPrediction(
        float(p50),
        float(p95),
        float(p99),
        float(np.mean(np.any(every_wait > 0, axis=1))),
        float(every_wait.mean()),
        int(latency.size),
        int(repeats),
    )
