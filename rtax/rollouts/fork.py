"""``rtax fork``: a group of G environments at once, restored from one snapshot, beside G cold
creates and G warm claims at once, each group a load run (docs/load.md#fork).

Why three load runs in one command (docs/measurement.md#launch-paths): group-based RL (G
rollouts of one task) asks how fast G environments of one prepared state are ready; the answer
means something only beside the other ways to G environments, measured the same minute on the
same engine. Each group is the burst shape of `rtax burst` (all G released at once, every
rollout stored and linked to its load run, whose ``launch_type`` says the path), so the Capacity
page and `rtax loads` show them like any other load run. The snapshot is made before the
restore group's clock starts, and the warm pool is full (G ready) before its group is released.
"""

from __future__ import annotations

import dataclasses
import threading
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from rtax.compose import Composition, check_database
from rtax.core import paths, workloads
from rtax.core.options import RolloutOptions
from rtax.rollouts import burst
from rtax.rollouts.burst import BurstResult
from rtax.settings.loads import LoadPlan
from rtax.settings.pool import PoolSettings
from rtax.store.spool import Spool
from rtax.substrates.base import Substrate
from rtax.substrates.pool import WarmPool
from rtax.substrates.restore import Restorer

#: The paths a fork compares, in the order they run.
PATHS = ("cold", "warm", "restore")


@dataclass
class ForkResult:
    """The three load runs of one fork, by path."""

    db: Path
    group: int
    runs: dict[str, BurstResult] = field(default_factory=dict)

    def summary(self) -> str:
        lines = [f"fork of {self.group} (T0): time to the first and to all {self.group} ready"]
        for path, result in self.runs.items():
            row = result.row or {}
            first, every = row.get("time_to_first_ready_s"), row.get("time_to_all_ready_s")
            lines.append(
                f"  {path:<8} first {_ms(first)}, all {_ms(every)}, "
                f"{row.get('ok')} of {row.get('rollouts')} ok   (load {result.load_id[:12]})"
            )
        return "\n".join(lines)

    @property
    def interrupted(self) -> BaseException | None:
        return next((r.interrupted for r in self.runs.values() if r.interrupted), None)


def _ms(value: object) -> str:
    return f"{float(value) * 1e3:8.1f} ms" if isinstance(value, int | float) else "     n/a"


def fork(
    substrate: str,
    group: int,
    *,
    db: Path | None = None,
    config: Path | None = None,
    deadline: float = 3600.0,
    log: Callable[[str], None] | None = None,
    progress: bool = False,
    stop: threading.Event | None = None,
) -> ForkResult:
    """Run the three groups of `group` T0 rollouts on `substrate` (cold, warm, restore) and
    store them as three load runs in `db`. A substrate that can't snapshot is refused before
    any group runs (`NotSupported`)."""
    plan = LoadPlan(substrate=substrate, tier="T0", shape="burst", n=group).check()
    check_database(db)
    say = log or (lambda _: None)
    workload = workloads.build("T0")
    with Composition(config_path=config, database=db, log=log) as compose:
        result = ForkResult(compose.database or paths.default_db(), group)
        conf = compose.entry(substrate)
        opt = compose.probe_options
        subs: dict[str, Substrate] = {
            "cold": compose.build(conf),
            "warm": WarmPool(
                compose.build(conf),
                PoolSettings(group, group),
                rollout_lifetime_s=deadline + opt.cleanup_timeout_s,
                running_timeout_s=opt.running_timeout_s,
                ready_timeout_s=opt.ready_timeout_s,
                ready_interval_s=opt.ready_interval_s,
                cleanup_timeout_s=opt.cleanup_timeout_s,
            ),
            "restore": Restorer(
                compose.build(conf),
                running_timeout_s=opt.running_timeout_s,
                ready_timeout_s=opt.ready_timeout_s,
                ready_interval_s=opt.ready_interval_s,
                cleanup_timeout_s=opt.cleanup_timeout_s,
                on_snapshot=compose.record_snapshot,
            ),
        }
        try:
            for path in PATHS:
                sub = subs[path]
                compose.ready(sub, say)  # the warm pool fills here, before its clock
                if isinstance(sub, Restorer):
                    say(f"fork: making the snapshot of T0 on {substrate}")
                    sub.ensure(workload)
                run = BurstResult(
                    result.db,
                    plan=dataclasses.replace(plan, name=f"fork-{path}"),
                    load_id=uuid.uuid4().hex,
                )
                spool = Spool(run.db, compose.store, on_saved=run.saved)
                with compose.store() as store:
                    run.replayed = spool.replay(store)
                    burst.run(
                        sub,
                        workload,
                        run.plan,
                        store=store,
                        spool=spool,
                        result=run,
                        options=RolloutOptions(deadline_s=deadline),
                        progress=progress,
                        stop=stop,
                    )
                result.runs[path] = run
                if run.interrupted is not None:
                    break
        finally:
            for sub in subs.values():
                sub.close()
    return result
