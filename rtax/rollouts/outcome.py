"""What a batch (`rtax probe`) or a load run (`rtax burst`) ended with: its rollouts' records,
each stored or spooled, whether it was interrupted, and the table printed at its end.

Why one base: both commands store every rollout as it finishes through the same spool, end the
same way (what was replayed, spooled or lost, the exit code: docs/cli.md) and print the same
per-phase table; the CLI reads either through this one shape.
"""

from __future__ import annotations

import math
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rtax.analysis import stats
from rtax.core.record import PHASES, RolloutRecord, phases_of
from rtax.store.spool import MEMORY, Spool


@dataclass
class Outcome:
    """The rollouts of one batch or load run, each already stored in `db` (or spooled)."""

    db: Path
    records: list[RolloutRecord] = field(default_factory=list)
    #: run_id -> where a rollout went that the database could not take (a spool file, or
    #: `rtax.store.spool.MEMORY`: then it is lost when the process exits); written on the
    #: next start
    spooled: dict[str, str] = field(default_factory=dict)
    #: rollouts an earlier probe or scheduler had spooled, written at this one's start
    replayed: int = 0
    #: Ctrl-C or SIGTERM ended it early: the rollouts in progress were cleaned up and not
    #: recorded (half a rollout is no sample), the ones before are stored
    interrupted: KeyboardInterrupt | None = None

    @property
    def lost(self) -> list[str]:
        """Rollouts neither stored nor spooled to a file (held in memory only)."""
        return [run_id for run_id, where in self.spooled.items() if where == MEMORY]

    @property
    def failed(self) -> int:
        return sum(not r.ok for r in self.records)

    def saved(self, record: RolloutRecord) -> None:
        """`record` is in the database now (a spooled one written by a later save's drain):
        no longer reported as spooled, or lost."""
        self.spooled.pop(record.run["run_id"], None)

    def keep(self, record: RolloutRecord, spool: Spool, store: Any) -> None:
        """Save `record` through `spool` (retried, else spooled) and count it."""
        where = spool.save(record, store)
        if where is not None:
            self.spooled[record.run["run_id"]] = where
        self.records.append(record)

    def last_try(self, spool: Spool, store: Any) -> None:
        """Store (or spool to a file) the records only held in memory, as this one ends."""
        held, spool.pending = spool.pending, []
        for record in held:
            where = spool.save(record, store)
            if where is None:
                self.spooled.pop(record.run["run_id"], None)
            else:
                self.spooled[record.run["run_id"]] = where

    def summary(self) -> str:
        """The end-of-run table: p50/p95/mean/n/success per phase, in milliseconds."""
        return summary(self.records, self.db)


class _NoBar:
    def __enter__(self) -> _NoBar:
        return self

    def __exit__(self, *exc: object) -> None:
        pass

    def update(self, n: int) -> None:
        pass

    def set_postfix_str(self, text: str) -> None:
        pass


def progress_bar(total: int, desc: str, *, enabled: bool = True) -> Any:
    """The CLI's progress bar on stderr (tqdm), or one that shows nothing."""
    if not enabled:
        return _NoBar()
    from tqdm import tqdm

    return tqdm(
        total=total,
        desc=desc,
        unit="rollout",
        file=sys.stderr,
        leave=True,
        disable=None,
        dynamic_ncols=True,
    )


def summary(records: list[RolloutRecord], db: Path) -> str:
    """p50/p95/mean/n/success per phase and per action, in milliseconds, with the failures."""
    import pandas as pd

    runs = pd.DataFrame([r.run for r in records])
    table = stats.phase_summary(runs)
    # only the phases these rollouts have: a warm one claims, a cold one creates
    had = {p for t in runs.get("launch_type", pd.Series(["cold"])) for p in phases_of(t)}
    table = table[table["phase"].isin(had) | ~table["phase"].isin(PHASES)]
    per_action = pd.DataFrame(
        [a for r in records if r.ok for a in r.actions if a["phase"] == "action"]
    )
    action_row = stats.summarize(per_action["latency_s"] if not per_action.empty else [], (50, 95))
    lines = [
        f"{len(records)} rollouts, {int(runs['status'].eq('ok').sum())} ok -> {db}",
        f"{'phase':<24}{'p50 ms':>11}{'p95 ms':>11}{'mean ms':>11}{'n':>6}{'success':>9}",
    ]

    def fmt(x: float) -> str:
        return f"{x * 1000:11.2f}" if not math.isnan(x) else f"{'-':>11}"

    rate = table["success_rate"].iloc[0] if len(table) else math.nan
    for row in table.itertuples():
        lines.append(
            f"{row.phase:<24}{fmt(row.p50)}{fmt(row.p95)}{fmt(row.mean)}{row.n:>6}{rate:>9.0%}"
        )
    lines.append(
        f"{'per action':<24}{fmt(action_row['p50'])}{fmt(action_row['p95'])}"
        f"{fmt(action_row['mean'])}{action_row['n']:>6}{rate:>9.0%}"
    )
    errors = runs.loc[runs["status"] != "ok", "error_class"].value_counts()
    for error_class, count in errors.items():
        lines.append(f"failed: {count} x {error_class}")
    return "\n".join(lines)
