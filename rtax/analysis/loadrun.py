"""The record of one load run, from its rollouts' timings: pure arithmetic, no clock, no I/O.

Why apart from the runner (docs/load.md#the-record): the figures a planner reads (achieved
creates/s, time to first and to all ready, peak concurrency, dispatch lag, the harness's CPU)
must mean the same thing whichever way they were measured, and tests feed this module timings
worked out by hand. Every time is on one monotonic timeline (`rtax.substrates.base.clock`),
in seconds; `start` is the moment the load's first launch was due.

What is counted where:

- a rollout's *create request* is its start (its probe runner's clock at the create call);
  its create was *accepted* when its orchestration phase began (``orchestration_s`` set), at
  start + ``create_s``; achieved creates/s = accepted creates / (the last acceptance − the
  first request): the rate the substrate's API took creates at, whatever the shape asked for;
- a rollout was *ready* at start + ``time_to_first_command_s``; time to first (all) ready is
  from `start` to the first (last) such moment, and time to all ready is NULL unless every
  planned rollout became ready;
- concurrency is the most rollouts in flight at once (create request → end of cleanup);
- dispatch lag is each rollout's start minus the moment its launch was due;
- 429s: the rate-limit waits the substrates recorded (`RateLimitWait`), with the time spent
  in them; rollouts that gave up are among the failures as ``rate_limited``.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from rtax.analysis import stats


@dataclass
class Launch:
    """One launch of a load run, as the runner saw it (clock timeline, seconds)."""

    index: int
    #: when the shape had it due
    scheduled: float
    #: when its rollout's create request went out (None: it never started)
    started: float | None = None
    #: the rollout's run row once recorded (None: not recorded, e.g. stopped half-way)
    run: Mapping[str, Any] | None = None


def rate_limit_waits(run: Mapping[str, Any]) -> tuple[int, float]:
    """(waits, seconds waited) that rate limiting cost one rollout, from its provenance."""
    provenance = run.get("provenance")
    if isinstance(provenance, str):
        try:
            provenance = json.loads(provenance)
        except ValueError:
            return 0, 0.0
    waits = (provenance or {}).get("rate_limit_waits") or []
    return len(waits), float(sum(w.get("wait_s") or 0.0 for w in waits))


def peak_in_flight(spans: Sequence[tuple[float, float]]) -> int:
    """The most (start, end) spans open at one moment; a span ending when another starts does
    not overlap it."""
    events = sorted([(s, 1) for s, _ in spans] + [(e, -1) for _, e in spans])
    peak = current = 0
    for _, step in events:  # at equal times the end (-1) sorts first
        current += step
        peak = max(peak, current)
    return peak


def figures(
    launches: Sequence[Launch],
    *,
    start: float,
    planned: int,
    cpu_s: float,
    end: float | None = None,
) -> dict[str, Any]:
    """The load run's measured columns (`rtax.store.schema.LOAD_RUN_COLUMNS`'s figures) from
    its launches. `planned`: the rollouts the plan asked for; `cpu_s`: the harness's own CPU
    time over the run; `end`: when the run ended (default: the last rollout's end)."""
    recorded = [(launch, launch.run) for launch in launches if launch.run is not None]
    failures = Counter(
        str(run.get("error_class")) for _, run in recorded if run.get("status") != "ok"
    )
    timed = [(launch.started, run) for launch, run in recorded if launch.started is not None]
    ready_at = [
        t + run["time_to_first_command_s"]
        for t, run in timed
        if run.get("time_to_first_command_s") is not None
    ]
    requests = [t for t, run in timed if run.get("create_s") is not None]
    accepted = [
        t + run["create_s"]
        for t, run in timed
        if run.get("create_s") is not None and run.get("orchestration_s") is not None
    ]
    creates_per_s = None
    if accepted and max(accepted) > min(requests):
        creates_per_s = len(accepted) / (max(accepted) - min(requests))
    spans = [(t, t + run["wall_s"]) for t, run in timed if run.get("wall_s") is not None]
    if end is None:
        end = max((e for _, e in spans), default=start)
    duration = max(end - start, 0.0)
    lags = [launch.started - launch.scheduled for launch in launches if launch.started is not None]
    waits = [rate_limit_waits(run) for _, run in recorded]
    all_ready = len(ready_at) == planned and len(recorded) == planned
    return {
        "rollouts": len(recorded),
        "ok": sum(run.get("status") == "ok" for _, run in recorded),
        "ready": len(ready_at),
        "concurrency": peak_in_flight(spans),
        "duration_s": duration,
        "creates_per_s": creates_per_s,
        "time_to_first_ready_s": min(ready_at) - start if ready_at else None,
        "time_to_all_ready_s": max(ready_at) - start if ready_at and all_ready else None,
        "failures": json.dumps(dict(sorted(failures.items()))),
        "rate_limit_waits": sum(n for n, _ in waits),
        "rate_limit_wait_s": sum(s for _, s in waits),
        "harness_cpu_s": cpu_s,
        "harness_cpu_cores": cpu_s / duration if duration > 0 else None,
        "dispatch_lag_p50_s": stats.percentile(lags, 50) if lags else None,
        "dispatch_lag_max_s": max(lags) if lags else None,
    }


def describe(row: dict[str, Any]) -> list[str]:
    """The load run's figures as lines (the CLI's summary above the phase table)."""
    if not row:
        return []

    def s(value: Any, unit: str = " s", fmt: str = ".3f") -> str:
        return "-" if value is None or value != value else f"{value:{fmt}}{unit}"

    every = f" every {row['every_s'] * 1000:g} ms" if row.get("every_s") else ""
    return [
        f"load {row['load_id']} ({row['status']}): {row['shape']} of {row['n']}{every} on "
        f"{row['substrate']} {row['tier']}",
        f"  {row['rollouts']} rollouts stored, {row['ok']} ok, {row['ready']} ready; "
        f"peak concurrency {row['concurrency']}",
        f"  achieved creates/s {s(row['creates_per_s'], '', '.2f')}; time to first ready "
        f"{s(row['time_to_first_ready_s'])}, to all ready {s(row['time_to_all_ready_s'])}",
        f"  failures {_failures(row['failures'])}; rate-limit waits {row['rate_limit_waits']} "
        f"({s(row['rate_limit_wait_s'])})",
        f"  harness CPU {s(row['harness_cpu_s'])} = {s(row['harness_cpu_cores'], '', '.2f')} "
        f"of a core over {s(row['duration_s'])}; dispatch lag p50 "
        f"{s(_ms(row['dispatch_lag_p50_s']), ' ms', '.1f')}, max "
        f"{s(_ms(row['dispatch_lag_max_s']), ' ms', '.1f')}",
    ]


def _failures(text: Any) -> str:
    counts = json.loads(text) if isinstance(text, str) and text else {}
    return ", ".join(f"{n} x {name}" for name, n in counts.items()) or "none"


def _ms(seconds: Any) -> Any:
    return None if seconds is None or seconds != seconds else seconds * 1000
