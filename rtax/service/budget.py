"""Daily budgets: what a substrate may spend, what it has spent, and whether to probe again.

Why a module of its own: probing a cloud costs money, so the scheduler must stop when a
substrate's budget is used up, and the dashboard must show the same arithmetic the scheduler
applied (docs/configuration.md#budgets). Both call these pure functions over the store's `spend`
figures. A day is a UTC day. The check happens before a rollout starts, so a day can overshoot its
environment-minute budget by at most one rollout (bounded by the scheduler's deadline).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

import pandas as pd

from rtax.settings import SubstrateConfig


def day_start(now: datetime | None = None) -> datetime:
    """Midnight UTC of the day `now` falls in: budgets are per UTC day."""
    now = (now or datetime.now(UTC)).astimezone(UTC)
    return now.replace(hour=0, minute=0, second=0, microsecond=0)


def exceeded(conf: SubstrateConfig, rollouts: int, env_minutes: float) -> str | None:
    """Why `conf`'s budget forbids another rollout today, or None if it allows one."""
    if conf.max_rollouts_per_day is not None and rollouts >= conf.max_rollouts_per_day:
        return f"{rollouts} of {conf.max_rollouts_per_day} rollouts used today"
    if conf.max_env_minutes_per_day is not None and env_minutes >= conf.max_env_minutes_per_day:
        return (
            f"{env_minutes:.1f} of {conf.max_env_minutes_per_day:g} environment-minutes used today"
        )
    return None


def forbids(conf: SubstrateConfig, store: Any, *, running: Sequence[float] = ()) -> str | None:
    """Why today's budget of `conf` forbids another rollout, or None: its spending in `store`
    today plus the rollouts still `running` (their monotonic start times: not in the database
    yet, their environments' minutes counted so far). The scheduler's check before a rollout."""
    if conf.max_rollouts_per_day is None and conf.max_env_minutes_per_day is None:
        return None
    since = day_start().isoformat(timespec="microseconds")
    # Only spending at this substrate's own fidelity counts: emulated rollouts under the same
    # name (a demo, `rtax emulate`) cost nothing and must not use up a real budget.
    fidelity = "emulated" if conf.emulate else conf.params.get("fidelity", "real")
    spend = store.runs.spend(substrate=conf.name, fidelity=fidelity, since=since)
    rollouts, minutes = spent(spend, conf.name)
    rollouts += len(running)
    minutes += sum(time.monotonic() - t for t in running) / 60
    return exceeded(conf, rollouts, minutes)


def spent(spend: pd.DataFrame, name: str) -> tuple[int, float]:
    """(rollouts, environment-minutes) of substrate `name` in a ``store.runs.spend()`` frame."""
    rows = spend[spend["substrate"] == name]
    return int(rows["rollouts"].sum()), float(rows["env_minutes"].sum())


SPEND_COLUMNS = (
    "substrate",
    "fidelity",
    "rollouts",
    "max_rollouts_per_day",
    "env_minutes",
    "max_env_minutes_per_day",
    "status",
)


def spend_table(spend: pd.DataFrame, substrates: dict[str, SubstrateConfig]) -> pd.DataFrame:
    """Today's spend per substrate beside its budget, for every configured substrate and
    every substrate that spent anything (a substrate run by hand has no budget: "no budget")."""
    names = sorted(set(substrates) | set(spend["substrate"]))
    rows = []
    for name in names:
        conf = substrates.get(name)
        rollouts, minutes = spent(spend, name)
        fidelities = sorted(set(spend.loc[spend["substrate"] == name, "fidelity"].dropna()))
        if conf is None:
            status = "no budget (not in the configuration)"
        elif conf.max_rollouts_per_day is None and conf.max_env_minutes_per_day is None:
            status = "no budget"
        else:
            status = exceeded(conf, rollouts, minutes) and "budget used up: probing paused"
            status = status or "within budget"
        rows.append(
            {
                "substrate": name,
                "fidelity": ", ".join(fidelities) or "-",
                "rollouts": rollouts,
                "max_rollouts_per_day": conf.max_rollouts_per_day if conf else None,
                "env_minutes": round(minutes, 2),
                "max_env_minutes_per_day": conf.max_env_minutes_per_day if conf else None,
                "status": status,
            }
        )
    return pd.DataFrame(rows, columns=list(SPEND_COLUMNS))
