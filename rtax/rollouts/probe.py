"""A batch of rollouts on one named substrate: what ``rtax probe`` does, as one library call.

Why a module apart from the CLI (docs/cli.md; the sqlite-utils habit): the command only maps
its flags onto a `Probe` and turns its errors into one line, so that a script gets the same
checks, the same wiring (`rtax.compose`) and the same records without going through argparse.
Every rollout is stored as soon as it finishes; an interrupted batch keeps what it stored.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

from rtax.compose import ComposeError, Composition, check_database
from rtax.core import paths, workloads
from rtax.core.options import RolloutOptions
from rtax.core.record import RolloutRecord
from rtax.rollouts.outcome import Outcome, progress_bar
from rtax.rollouts.rollout import run_rollout
from rtax.store.spool import Spool
from rtax.substrates.base import Substrate

Log = Callable[[str], None]


@dataclass(frozen=True)
class Probe:
    """What ``rtax probe`` asks for, flag for flag (docs/cli.md): `repeat` rollouts of `tier`
    (and `steps` actions) on the substrate called `substrate` (configured in `config`, else
    built in), stored in `db` (default data/rtax.db).

    T2 clones from `repo_url`: ``serve`` (the fixture over git:// for this batch), ``path``
    (the fixture by path; local only) or any git URL, at `commit` with `fix_patch` fixing
    `failing_test` (each defaulting to the fixture's)."""

    substrate: str = "local"
    tier: str = "T0"
    steps: int = 0
    repeat: int = 1
    seed: int = 0
    #: the action mode ("exec", "session") of a kind that has modes; None: its default
    mode: str | None = None
    db: Path | None = None
    config: Path | None = None
    deadline: float = 3600.0
    #: every command's timeout, over the workload's own
    action_timeout: float | None = None
    repo_url: str = "serve"
    commit: str | None = None
    fix_patch: Path | None = None
    failing_test: str | None = None

    def check(self) -> None:
        """Refuse mistakes before any slow work, each as one line (`ComposeError`,
        `rtax.core.workloads.WorkloadError`)."""
        workloads.validate(self.tier, self.steps)
        check_database(self.db)
        t2_only = [
            f"--{flag}"
            for flag, value in (
                ("commit", self.commit),
                ("fix-patch", self.fix_patch),
                ("failing-test", self.failing_test),
            )
            if value is not None
        ] + (["--repo-url"] if self.repo_url != "serve" else [])
        if t2_only and self.tier != "T2":
            raise ComposeError(f"{', '.join(t2_only)} only apply to --tier T2")

    @property
    def label(self) -> str:
        """What the progress bar calls it: ``docker T2 S=10``."""
        return f"{self.substrate} {self.tier}" + (f" S={self.steps}" if self.steps else "")


@dataclass
class ProbeResult(Outcome):
    """The rollouts of one `probe` call, each already stored in `db`."""

    substrate: str = "local"


def probe(
    request: Probe,
    *,
    log: Log | None = None,
    progress: bool = False,
    stop: threading.Event | None = None,
) -> ProbeResult:
    """Run `request`'s rollouts and store each as it finishes (`Probe`). Mistakes are refused
    before any slow work, as one-line errors. `stop`, once set, ends the batch like Ctrl-C
    (the rollout in progress stops at its next step, cleans up and is not stored), even when
    the signal's own exception was lost."""
    request.check()
    with Composition(
        config_path=request.config, database=request.db, log=log, deadline_s=request.deadline
    ) as composition:
        # a warm pool, when the entry has one: filled by `ready`, destroyed as this ends
        sub = composition.substrate(request.substrate, pooled=True, mode=request.mode)
        if request.repo_url == "path" and sub.kind != "local":
            raise ComposeError(
                f"--repo-url path: a {sub.kind} environment can't see this host's files; use "
                "'serve' (the default) or a git URL"
            )
        composition.fixture()  # built (once) before the substrate prepares
        composition.ready(sub, log or (lambda _: None), t2=request.tier == "T2")
        result = ProbeResult(
            composition.database if composition.database is not None else paths.default_db(),
            substrate=request.substrate,
        )
        spool = Spool(result.db, composition.store, on_saved=result.saved)
        with composition.store() as store:
            result.replayed = spool.replay(store)  # what an earlier probe or scheduler spooled
            workload = _workload(request, composition, sub)
            options = RolloutOptions(deadline_s=request.deadline, cancel=stop)
            try:
                with progress_bar(request.repeat, request.label, enabled=progress) as bar:
                    for _ in range(request.repeat):
                        record = _one(sub, workload, options, stop)
                        result.keep(record, spool, store)
                        wall = record.run["wall_s"]
                        bar.set_postfix_str(f"last {wall:.3f}s, failed {result.failed}")
                        bar.update(1)
            except KeyboardInterrupt as exc:
                result.interrupted = exc
            if spool.pending:  # a last chance before the process takes them away
                result.last_try(spool, store)
    return result


def _workload(request: Probe, composition: Composition, sub: Substrate) -> workloads.Workload:
    """The batch's workload: T2 clones from `request`'s repository (read here, one line if
    it can't be); every command takes `action_timeout` when one is given."""
    source = None
    if request.tier == "T2":
        patch = None
        if request.fix_patch is not None:
            try:
                patch = request.fix_patch.read_text()
            except OSError as exc:
                raise ComposeError(
                    f"cannot read --fix-patch {request.fix_patch}: {exc.strerror}"
                ) from None
        source = composition.source(
            sub,
            repo_url=request.repo_url,
            commit=request.commit,
            fix_patch=patch,
            failing_test=request.failing_test,
        )
    workload = workloads.build(request.tier, steps=request.steps, seed=request.seed, source=source)
    if request.action_timeout is not None:
        workload = with_timeout(workload, request.action_timeout)
    return workload


def _one(
    sub: Substrate,
    workload: workloads.Workload,
    options: RolloutOptions,
    stop: threading.Event | None,
) -> RolloutRecord:
    """One rollout; a stop asked for before it starts or while it runs ends the batch, and
    half a rollout is no sample: not stored."""
    _stop_if_asked(stop)
    record = run_rollout(sub, workload, options=options)
    _stop_if_asked(stop)
    return record


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
