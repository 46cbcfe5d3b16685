"""A batch of rollouts on one named substrate: what ``rtax probe`` does, as one library call.

Why a module apart from the CLI (docs/cli.md; the sqlite-utils habit): the command only maps
its flags onto `probe` and turns its errors into one line, so that a script gets the same
checks, the same wiring (`rtax.compose`) and the same records without going through argparse.
Every rollout is stored as soon as it finishes; an interrupted batch keeps what it stored.
"""

from __future__ import annotations

import math
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from rtax.analysis import stats
from rtax.compose import ComposeError, Composition, check_database
from rtax.core import paths, workloads
from rtax.core.options import RolloutOptions
from rtax.core.record import PHASES, RolloutRecord, phases_of
from rtax.rollouts.rollout import run_rollout
from rtax.store.spool import MEMORY, Spool


@dataclass
class Batch:
    """The rollouts of one `probe` call, each already stored in `db`."""

    substrate: str
    db: Path
    records: list[RolloutRecord] = field(default_factory=list)
    #: run_id -> where a rollout went that the database could not take (a spool file, or
    #: `spool.MEMORY`: then it is lost when the process exits); written on the next start
    spooled: dict[str, str] = field(default_factory=dict)
    #: rollouts an earlier probe or scheduler had spooled, written at this batch's start
    replayed: int = 0
    #: Ctrl-C or SIGTERM ended the batch early: the rollout in progress was cleaned up and not
    #: recorded (half a rollout is no sample), the ones before it are stored
    interrupted: KeyboardInterrupt | None = None

    @property
    def lost(self) -> list[str]:
        """Rollouts neither stored nor spooled to a file (held in memory only)."""
        return [run_id for run_id, where in self.spooled.items() if where == MEMORY]

    @property
    def failed(self) -> int:
        return sum(not r.ok for r in self.records)

    def summary(self) -> str:
        """The end-of-probe table: p50/p95/mean/n/success per phase, in milliseconds."""
        return summary(self.records, self.db)


def probe(
    substrate: str = "local",
    *,
    tier: str = "T0",
    steps: int = 0,
    repeat: int = 1,
    seed: int = 0,
    db: Path | None = None,
    config: Path | None = None,
    deadline: float = 3600.0,
    action_timeout: float | None = None,
    repo_url: str = "serve",
    commit: str | None = None,
    fix_patch: Path | None = None,
    failing_test: str | None = None,
    mode: str | None = None,
    log: Callable[[str], None] | None = None,
    progress: bool = False,
    stop: threading.Event | None = None,
) -> Batch:
    """Run `repeat` rollouts of `tier` on the substrate called `substrate` (configured in
    `config`, else built in) and store each in `db` (default data/rtax.db).

    T2 clones from `repo_url`: ``serve`` (the fixture over git:// for this batch), ``path``
    (the fixture by path; local only) or any git URL, at `commit` with `fix_patch` fixing
    `failing_test` (each defaulting to the fixture's). Mistakes are refused before any slow
    work, as one-line errors (`ComposeError`, `WorkloadError`, ...). `stop`, once set, ends the
    batch like Ctrl-C (the rollout in progress stops at its next step, cleans up and is not
    stored), even when the signal's own exception was lost."""
    workloads.validate(tier, steps)
    check_database(db)
    t2_only = [
        f"--{flag}"
        for flag, value in (
            ("commit", commit),
            ("fix-patch", fix_patch),
            ("failing-test", failing_test),
        )
        if value is not None
    ] + (["--repo-url"] if repo_url != "serve" else [])
    if t2_only and tier != "T2":
        raise ComposeError(f"{', '.join(t2_only)} only apply to --tier T2")
    with Composition(config_path=config, database=db, log=log, deadline_s=deadline) as composition:
        # a warm pool, when the entry has one: filled by `ready`, destroyed as this ends
        sub = composition.substrate(substrate, pooled=True, mode=mode)
        if repo_url == "path" and sub.kind != "local":
            raise ComposeError(
                f"--repo-url path: a {sub.kind} environment can't see this host's files; use "
                "'serve' (the default) or a git URL"
            )
        composition.fixture()  # built (once) before the substrate prepares
        composition.ready(sub, log or (lambda _: None), t2=tier == "T2")
        batch = Batch(substrate, db if db is not None else paths.default_db())
        # A record spooled now and written by a later save's drain is stored: no longer
        # reported as spooled (or lost).
        spool = Spool(
            batch.db,
            composition.store,
            on_saved=lambda record: batch.spooled.pop(record.run["run_id"], None),
        )
        with composition.store() as store:
            batch.replayed = spool.replay(store)  # what an earlier probe or scheduler spooled
            source = None
            if tier == "T2":
                patch = None
                if fix_patch is not None:
                    try:
                        patch = fix_patch.read_text()
                    except OSError as exc:
                        raise ComposeError(
                            f"cannot read --fix-patch {fix_patch}: {exc.strerror}"
                        ) from None
                source = composition.source(
                    sub,
                    repo_url=repo_url,
                    commit=commit,
                    fix_patch=patch,
                    failing_test=failing_test,
                )
            workload = workloads.build(tier, steps=steps, seed=seed, source=source)
            if action_timeout is not None:
                workload = with_timeout(workload, action_timeout)
            options = RolloutOptions(deadline_s=deadline, cancel=stop)
            label = f"{substrate} {tier}" + (f" S={steps}" if steps else "")
            bar = progress_bar(repeat, label, enabled=progress)
            try:
                with bar:
                    for _ in range(repeat):
                        _stop_if_asked(stop)
                        record = run_rollout(sub, workload, options=options)
                        _stop_if_asked(stop)  # half a rollout is no sample: not stored
                        where = spool.save(record, store)  # retried, else spooled
                        if where is not None:
                            batch.spooled[record.run["run_id"]] = where
                        batch.records.append(record)
                        wall = record.run["wall_s"]
                        bar.set_postfix_str(f"last {wall:.3f}s, failed {batch.failed}")
                        bar.update(1)
            except KeyboardInterrupt as exc:
                batch.interrupted = exc
            if spool.pending:  # a last chance before the process takes them away
                last_try(spool, store, batch)
    return batch


def last_try(spool: Spool, store: Any, batch: Any) -> None:
    """Store (or spool to a file) the records only held in memory, as the batch ends; `batch`
    is anything with a `spooled` map (a `Batch`, a load run's result)."""
    held, spool.pending = spool.pending, []
    for record in held:
        where = spool.save(record, store)
        if where is None:
            batch.spooled.pop(record.run["run_id"], None)
        else:
            batch.spooled[record.run["run_id"]] = where


def _stop_if_asked(stop: threading.Event | None) -> None:
    if stop is not None and stop.is_set():
        raise KeyboardInterrupt


def with_timeout(workload: workloads.Workload, timeout_s: float) -> workloads.Workload:
    """`workload` with every command's timeout replaced by `timeout_s`."""
    return replace(
        workload,
        setup=tuple(replace(a, timeout_s=timeout_s) for a in workload.setup),
        actions=tuple(replace(a, timeout_s=timeout_s) for a in workload.actions),
    )


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
