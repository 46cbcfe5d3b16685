"""A synthetic rtax database for render benchmarks: realistic shapes, clearly not measurements.

Why: the dashboard must stay fast over months of probes (100,000 runs, 2,300,000 actions, or a
year of 1,000,000 runs), and no one should wait months to check that. Every row made here is
marked as synthetic three ways, so it can never pass for data: fidelity ``modelled``, host
``synthetic``, and ``"synthetic": true`` in its provenance. It refuses to write to the embedded
default database.

Why vectorised (issue 25): a loop in Python per run, building each row through the record's
builders, took 18 minutes for a year of probes. The random numbers are now drawn per chunk of
runs as numpy arrays and every column is computed on whole arrays, then inserted with
``executemany`` in one transaction. The rows still mean what the record's builders say
(`rtax.core.record.run_row`, `action_row`): the identity's and the provenance's columns are
taken from those builders themselves, and `mismatches` rebuilds runs through them from the same
draws and compares column by column, on the first runs of every file made
(tests/test_synthetic.py: on all of a small one).

    python benchmarks/synthetic.py /tmp/big.db --runs 100000
    python benchmarks/synthetic.py /tmp/rtax-1m.db --runs 1000000 --days 365
"""

from __future__ import annotations

import argparse
import json
import math
import sqlite3
import sys
import time
import uuid
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from functools import cached_property
from pathlib import Path
from typing import Any

import numpy as np
from tqdm import tqdm

from rtax import __version__
from rtax.core import paths
from rtax.core.record import (
    ACTION_COLUMNS,
    RUN_COLUMNS,
    RolloutIdentity,
    Timings,
    action_row,
    run_row,
)
from rtax.store.database import Store

#: series -> (median create, orchestration, ready, per-action seconds, clone seconds)
PROFILES = {
    ("local", "exec"): (0.02, 0.00003, 0.001, 0.003, 0.2),
    ("docker", "exec"): (0.008, 0.15, 0.04, 0.04, 0.22),
    ("docker", "session"): (0.008, 0.15, 0.045, 0.0006, 0.22),
    ("docker-gvisor", "exec"): (0.009, 0.29, 0.08, 0.08, 0.45),
}
#: (tier, steps, share of runs): about 23 action rows per run on average.
WORKLOADS = (
    ("T0", 0, 0.25),
    ("T1", 0, 0.20),
    ("T2", 0, 0.20),
    ("T2", 10, 0.15),
    ("T2", 50, 0.12),
    ("T2", 150, 0.08),
)
FIXED_ACTIONS = {"T0": 1, "T1": 3, "T2": 5}
ERRORS = ("action_timeout", "environment_lost", "workload_failed", "ready_timeout")
#: Each action row's phase, in a run's order, with its command (`_command` builds the rows).
PHASE_COMMANDS = {"ready": "true", "setup": "synthetic clone", "action": "synthetic"}
#: Runs drawn, computed and inserted at a time: big enough that numpy and ``executemany`` do the
#: work, small enough that a chunk's column lists (~460,000 action rows) stay a few hundred MB.
CHUNK_RUNS = 20_000
#: Runs of each chunk that `generate` rebuilds through the record's builders and compares.
CHECK_RUNS = 50
#: SQLite's page cache during the load (KiB). The actions' primary key is (run_id, seq) and run
#: ids are random, so each insert lands anywhere in its index (1.2 GB at 1,000,000 runs): a cache
#: that holds it saves re-reading pages (300,000 runs: 32 s to load with the default, 21 s).
LOAD_CACHE_KIB = 2 * 1024 * 1024
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_PROFILE_KEYS = tuple(PROFILES)
_STEPS = np.array([steps or FIXED_ACTIONS[tier] for tier, steps, _ in WORKLOADS])
_T2 = np.array([tier == "T2" for tier, _, _ in WORKLOADS])


@dataclass(frozen=True)
class Draws:
    """The random numbers of a chunk of runs, as arrays (one entry per run unless said), and
    nothing derived from them: what both the vectorised columns and the reference builders
    (`reference`) are computed from."""

    #: the runs' numbers in the file (0 = the first, the oldest)
    index: np.ndarray
    #: start, microseconds since the epoch (UTC)
    started_us: np.ndarray
    #: index into `PROFILES`: the series (substrate, mode)
    profile: np.ndarray
    #: index into `WORKLOADS`
    workload: np.ndarray
    create: np.ndarray
    orchestration: np.ndarray
    ready: np.ndarray
    #: 0.0 unless T2 (its clone)
    setup: np.ndarray
    cleanup: np.ndarray
    #: the harness's own time (wall minus the phases)
    overhead: np.ndarray
    failed: np.ndarray
    #: index into `ERRORS` (read only where failed)
    error: np.ndarray
    #: the random upper 64 bits of the run id (its lower 64 are `index`)
    id_high: np.ndarray
    #: every run's action latencies, concatenated in run order (`n_actions` each)
    latency: np.ndarray

    @cached_property
    def n_actions(self) -> np.ndarray:
        """The actions of each run's workload."""
        return _STEPS[self.workload]

    @cached_property
    def t2(self) -> np.ndarray:
        """Whether each run has a setup phase (a clone: tier T2)."""
        return _T2[self.workload]

    @cached_property
    def latency_start(self) -> np.ndarray:
        """Where each run's latencies start in `latency`."""
        n = self.n_actions
        return np.cumsum(n) - n


def draw(
    runs: int, *, seed: int = 0, days: float = 7.0, now: datetime, chunk: int = CHUNK_RUNS
) -> Iterator[Draws]:
    """`runs` runs started over the `days` before `now`, oldest first, drawn a chunk at a time
    from one generator seeded with `seed` (so a seed, a size, a chunk and `now` make one file)."""
    rng = np.random.default_rng(seed)
    span_us = int(days * 86400 * 1_000_000)
    end_us = (now - _EPOCH) // timedelta(microseconds=1)
    started_us = end_us - span_us + np.sort(rng.integers(0, span_us, runs))
    medians = np.array(list(PROFILES.values()))
    create_m, orch_m, ready_m, action_m, clone_m = medians.T
    cleanup_m = np.maximum(orch_m / 2, 0.002)
    shares = np.array([w[2] for w in WORKLOADS])
    for lo in range(0, runs, chunk):
        index = np.arange(lo, min(lo + chunk, runs))
        k = index.size
        profile = index % len(PROFILES)
        workload = rng.choice(len(WORKLOADS), size=k, p=shares)
        create, orchestration, ready = (
            rng.lognormal(np.log(m[profile]), 0.3) for m in (create_m, orch_m, ready_m)
        )
        setup = np.where(_T2[workload], rng.lognormal(np.log(clone_m[profile]), 0.2), 0.0)
        cleanup = rng.lognormal(np.log(cleanup_m[profile]), 0.2)
        overhead = rng.uniform(2e-5, 2e-4, k) + 1e-5 * _STEPS[workload]
        failed = rng.random(k) < 0.02
        error = rng.integers(0, len(ERRORS), k)
        id_high = rng.integers(0, 2**63, k)
        latency = rng.lognormal(np.repeat(np.log(action_m[profile]), _STEPS[workload]), 0.6)
        yield Draws(
            index=index,
            started_us=started_us[lo : lo + k],
            profile=profile,
            workload=workload,
            create=create,
            orchestration=orchestration,
            ready=ready,
            setup=setup,
            cleanup=cleanup,
            overhead=overhead,
            failed=failed,
            error=error,
            id_high=id_high,
            latency=latency,
        )


def provenance_of(seed: int) -> dict[str, Any]:
    """What every synthetic run's provenance says: that it is synthetic, and what made it."""
    return {
        "synthetic": True,
        "generator": "benchmarks/synthetic.py",
        "seed": seed,
        "host": "synthetic",
        "rtax_version": f"{__version__}+synthetic",
        "substrate": {"endpoint": "synthetic://"},
    }


def identity(profile: int, workload: int) -> RolloutIdentity:
    """A synthetic run's identity: its series' substrate and mode, its workload, ``modelled``."""
    substrate, mode = _PROFILE_KEYS[profile]
    tier, steps, _ = WORKLOADS[workload]
    n = steps or FIXED_ACTIONS[tier]
    return RolloutIdentity(
        substrate, substrate.split("-")[0], "modelled", tier, steps, mode=mode, n_actions=n
    )


def reference(
    d: Draws, k: int, provenance: Mapping[str, Any]
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """Run `k` of `d` and its action rows built one at a time through the record's builders
    (`run_row`, `action_row`), as this generator used to build every run: what the vectorised
    columns must equal."""
    tier = WORKLOADS[int(d.workload[k])][0]
    n = int(d.n_actions[k])
    start = int(d.latency_start[k])
    lat = d.latency[start : start + n]
    create, orch, ready, setup, cleanup, overhead = (
        float(a[k]) for a in (d.create, d.orchestration, d.ready, d.setup, d.cleanup, d.overhead)
    )
    failed = bool(d.failed[k])
    actions_s = float(lat.sum())
    episode = create + orch + ready + setup + actions_s
    wall = episode + cleanup + overhead
    run_id = uuid.UUID(int=int(d.id_high[k]) << 64 | int(d.index[k])).hex
    started = _EPOCH + timedelta(microseconds=int(d.started_us[k]))
    error_class = ERRORS[int(d.error[k])] if failed else None

    t = create + orch
    actions = [_command(run_id, 0, "ready", 0, t, ready)]
    t += ready
    seq = 1
    if tier == "T2":
        actions.append(_command(run_id, seq, "setup", 0, t, setup))
        seq, t = seq + 1, t + setup
    for i in range(n):
        actions.append(_command(run_id, seq + i, "action", i, t, float(lat[i])))
        t += float(lat[i])
    timings = Timings(
        phases={
            "create": create,
            "orchestration": orch,
            "ready": ready,
            "setup": setup,
            "actions": actions_s,
            "cleanup": cleanup,
        },
        wall_s=wall,
        milestones=[
            {"name": "created", "t_s": create},
            {"name": "running", "t_s": create + orch},
            {"name": "removed", "t_s": wall - overhead},
        ],
        actions=actions,
    )
    run = run_row(
        identity(int(d.profile[k]), int(d.workload[k])),
        run_id=run_id,
        started_at=started.isoformat(timespec="microseconds"),
        error_class=error_class,
        error_message="synthetic failure" if failed else None,
        provenance=provenance,
        timings=timings,
        episode_s=None if failed else episode,
        n_actions_done=n - 1 if failed else n,
        cleanup_ok=1,
    )
    run["ended_at"] = (started + timedelta(seconds=wall)).isoformat(timespec="microseconds")
    return run, actions


def _command(
    run_id: str, seq: int, phase: str, idx: int, t: float, latency: float
) -> dict[str, Any]:
    """A successful synthetic command row, through the record's one action-row builder."""
    return action_row(
        run_id=run_id,
        seq=seq,
        phase=phase,
        idx=idx,
        category="exec" if phase == "action" else phase,
        command=PHASE_COMMANDS[phase],
        exit_code=0,
        latency_s=latency,
        exec_s=latency,
        t_offset_s=t,
        stdout_bytes=3 if phase == "action" else 0,
        stderr_bytes=0,
        ok=1,
    )


def _by_workload(d: Draws) -> Iterator[tuple[np.ndarray, bool, np.ndarray]]:
    """Per workload present: its runs (indices into `d`), whether they are T2, and their
    latencies as a (runs, actions) array, so that sums and running offsets are taken row by row
    in the order the reference builders take them (on this machine, equal to the last bit)."""
    starts = d.latency_start
    for w in range(len(WORKLOADS)):
        runs = np.flatnonzero(d.workload == w)
        if runs.size:
            lat = d.latency[starts[runs][:, None] + np.arange(_STEPS[w])]
            yield runs, bool(_T2[w]), lat


def _pick(values: Sequence[Any], codes: np.ndarray) -> list[Any]:
    """`values[code]` for every code, as Python objects (what sqlite3 binds)."""
    return np.array(values, dtype=object)[codes].tolist()


def run_columns(d: Draws, provenance: Mapping[str, Any]) -> dict[str, list[Any]]:
    """Every run column of `d`, vectorised, computed as `run_row` computes it (`reference` is
    the same runs built by it). What does not vary between runs (host, version, endpoint,
    provenance, vantage, the unset fields) and the identity's fields are taken from the builders
    themselves, so they cannot drift from them."""
    k = d.index.size
    template, _ = reference(d, 0, provenance)
    cols: dict[str, list[Any]] = {c: [template[c]] * k for c in RUN_COLUMNS}
    combos = d.profile * len(WORKLOADS) + d.workload
    fields = [identity(p, w).fields() for p in range(len(PROFILES)) for w in range(len(WORKLOADS))]
    for name in fields[0]:
        cols[name] = _pick([f[name] for f in fields], combos)

    actions_s = np.empty(k)
    for runs, _, lat in _by_workload(d):
        actions_s[runs] = lat.sum(axis=1)
    create, orch, ready, setup, cleanup = d.create, d.orchestration, d.ready, d.setup, d.cleanup
    # The same operations in the same order as `reference` (and so `run_row`), left to right.
    episode = create + orch + ready + setup + actions_s
    wall = episode + cleanup + d.overhead
    phases_sum = create + orch + ready + setup + actions_s + cleanup  # `_derived`'s sum
    ids = [f"{h:016x}{i:016x}" for h, i in zip(d.id_high.tolist(), d.index.tolist(), strict=True)]
    ended_us = d.started_us + np.rint(wall * 1e6).astype(np.int64)
    failed = d.failed
    cols.update(
        run_id=ids,
        started_at=_iso(d.started_us),
        ended_at=_iso(ended_us),
        status=np.where(failed, "failed", "ok").tolist(),
        error_class=[
            ERRORS[e] if f else None for f, e in zip(failed.tolist(), d.error.tolist(), strict=True)
        ],
        error_message=np.where(failed, "synthetic failure", None).tolist(),
        create_s=create.tolist(),
        orchestration_s=orch.tolist(),
        ready_s=ready.tolist(),
        setup_s=setup.tolist(),
        actions_s=actions_s.tolist(),
        cleanup_s=cleanup.tolist(),
        overhead_s=(wall - phases_sum).tolist(),
        wall_s=wall.tolist(),
        time_to_first_command_s=(create + orch + ready).tolist(),
        episode_s=np.where(failed, None, episode.astype(object)).tolist(),
        n_actions_done=(d.n_actions - failed).tolist(),
        milestones=[
            json.dumps(
                [
                    {"name": "created", "t_s": c},
                    {"name": "running", "t_s": r},
                    {"name": "removed", "t_s": e},
                ]
            )
            for c, r, e in zip(
                create.tolist(),
                (create + orch).tolist(),
                (wall - d.overhead).tolist(),
                strict=True,
            )
        ],
    )
    return cols


def _iso(us: np.ndarray) -> list[str]:
    """Microseconds since the epoch as `datetime.isoformat(timespec="microseconds")` spells an
    aware UTC time."""
    return [f"{s}+00:00" for s in np.datetime_as_string(us.astype("datetime64[us]"), unit="us")]


def action_columns(d: Draws, run_ids: Sequence[str]) -> dict[str, list[Any]]:
    """Every action column of `d`'s runs (ids `run_ids`), vectorised, in run order: per run a
    ready command, a setup command if T2, then its actions, as `reference` makes them. A
    phase's constant columns are taken from `_command` itself."""
    t2 = d.t2.astype(np.int64)
    rows = 1 + t2 + d.n_actions
    start = np.cumsum(rows) - rows
    total = int(rows.sum())
    owner = np.repeat(np.arange(d.index.size), rows)
    seq = np.arange(total) - start[owner]
    # Each row's phase as its position in `PHASE_COMMANDS`: 0 ready, 1 setup, 2 action.
    phase = np.where(seq == 0, 0, np.where((seq == 1) & (t2[owner] == 1), 1, 2))
    idx = np.where(phase == 2, seq - 1 - t2[owner], 0)
    latency = np.empty(total)
    offset = np.empty(total)
    for runs, is_t2, lat in _by_workload(d):
        first = [d.create[runs] + d.orchestration[runs], d.ready[runs]]
        steps = np.column_stack([*first, *([d.setup[runs]] if is_t2 else []), lat])
        at = start[runs][:, None] + np.arange(steps.shape[1] - 1)
        latency[at] = steps[:, 1:]
        offset[at] = np.cumsum(steps, axis=1)[:, :-1]  # t: the sum of all before, in order
    templates = [_command("", 0, p, 0, 0.0, 0.0) for p in PHASE_COMMANDS]
    cols = {c: _pick([t[c] for t in templates], phase) for c in ACTION_COLUMNS}
    latencies = latency.tolist()
    cols.update(
        run_id=np.array(run_ids, dtype=object)[owner].tolist(),
        seq=seq.tolist(),
        idx=idx.tolist(),
        latency_s=latencies,
        exec_s=latencies,
        t_offset_s=offset.tolist(),
    )
    return cols


def mismatches(
    d: Draws,
    provenance: Mapping[str, Any],
    runs: int | None = None,
    columns: tuple[dict[str, list[Any]], dict[str, list[Any]]] | None = None,
) -> list[str]:
    """Where the vectorised columns of `d`'s first `runs` runs (all if None) differ from
    `reference`'s, up to float rounding (a relative 1e-12); empty if nowhere. `columns`: the
    (run, action) columns already computed."""
    run_cols, act_cols = columns or _columns(d, provenance)
    found: list[str] = []
    row = 0
    count = d.index.size if runs is None else min(runs, d.index.size)
    for k in range(count):
        run, actions = reference(d, k, provenance)
        found += [
            f"run {k} {c}: {run[c]!r} != {run_cols[c][k]!r}"
            for c in RUN_COLUMNS
            if not same(run[c], run_cols[c][k], c)
        ]
        for a in actions:
            found += [
                f"run {k} action {a['seq']} {c}: {a[c]!r} != {act_cols[c][row]!r}"
                for c in ACTION_COLUMNS
                if not same(a[c], act_cols[c][row], c)
            ]
            row += 1
    if runs is None and row != len(act_cols["run_id"]):
        found.append(f"{len(act_cols['run_id'])} action rows, the builders make {row}")
    return found


def same(expected: Any, got: Any, column: str) -> bool:
    """Equal, of the same type (an INTEGER stays one), floats up to rounding; milestones are
    compared as the JSON they are."""
    if column == "milestones":
        a, b = json.loads(expected), json.loads(got)
        return len(a) == len(b) and all(
            x["name"] == y["name"] and same(x["t_s"], y["t_s"], "t_s")
            for x, y in zip(a, b, strict=True)
        )
    if type(expected) is not type(got):
        return False
    if isinstance(expected, float):
        return math.isclose(expected, got, rel_tol=1e-12, abs_tol=1e-300)
    return bool(expected == got)


def _columns(
    d: Draws, provenance: Mapping[str, Any]
) -> tuple[dict[str, list[Any]], dict[str, list[Any]]]:
    """`d`'s run columns and action columns (whose run ids are the runs')."""
    runs = run_columns(d, provenance)
    return runs, action_columns(d, runs["run_id"])


def _insert(
    conn: sqlite3.Connection, table: str, names: Sequence[str], columns: Mapping[str, list[Any]]
) -> None:
    """Insert the rows of `columns` into `table`, in one ``executemany``.

    Why not bind every column: binding a parameter is most of sqlite3's cost per row, and a
    dozen of these columns hold one value in every row of a chunk (NULLs, 0, 1, the host, the
    provenance). Such a column (None, an int or a str alike in every row) is written as the
    literal SQLite's ``quote()`` makes of that value, which stores exactly what binding it
    would; the rest are bound, row by row as sqlite3 consumes them."""
    bound = [c for c in names if not _constant(columns[c])]
    values = [
        "?" if c in bound else conn.execute("SELECT quote(?)", (columns[c][0],)).fetchone()[0]
        for c in names
    ]
    conn.executemany(
        f"INSERT INTO {table} ({', '.join(names)}) VALUES ({', '.join(values)})",
        zip(*(columns[c] for c in bound), strict=True),
    )


def _constant(column: list[Any]) -> bool:
    """Whether `column` holds one None, int or str in every row (a float is always bound: its
    literal would not round-trip). Rows are compared with ``==``, so 1 and 1.0 count as alike;
    the column's declared type stores them alike too."""
    first = column[0] if column else 0.0
    return type(first) in (type(None), int, str) and column.count(first) == len(column)


def generate(
    path: Path,
    runs: int,
    seed: int = 0,
    days: float = 7.0,
    *,
    now: datetime | None = None,
    chunk: int = CHUNK_RUNS,
    progress: bool = True,
) -> tuple[int, int]:
    """Write `runs` synthetic runs started over the `days` before `now` (default: now) and
    their actions to a new database at `path`; return (runs, action rows). `progress`: a bar
    and the time of each stage on standard error.

    The file is a throwaway made from scratch, so the bulk load skips what protects a live
    store (no journal, no fsync) and builds the runs' secondary indexes once at the end
    instead of row by row. The file ends with exactly the schema `Store` makes: the same
    index statements, WAL mode, its migrations' version."""
    if path.resolve() == paths.default_db().resolve():
        raise SystemExit(f"refusing to write synthetic data to {path}")
    for stale in (path, path.with_name(f"{path.name}-wal"), path.with_name(f"{path.name}-shm")):
        stale.unlink(missing_ok=True)
    Store(path).close()  # the real schema, migrations included
    now = now or datetime.now(UTC)
    provenance = provenance_of(seed)
    say = _Say(progress)
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        for pragma in (
            "journal_mode = OFF",
            "synchronous = OFF",
            f"cache_size = -{LOAD_CACHE_KIB}",
            "temp_store = MEMORY",
        ):
            conn.execute(f"PRAGMA {pragma}")
        # The secondary indexes as the migrations made them (the primary keys' own stay).
        indexes = conn.execute(
            "SELECT name, sql FROM sqlite_master WHERE type = 'index' AND sql IS NOT NULL "
            "AND tbl_name IN ('runs', 'actions') ORDER BY rowid"
        ).fetchall()
        for name, _ in indexes:
            conn.execute(f'DROP INDEX "{name}"')
        n_actions = 0
        bar = tqdm(total=runs, unit=" runs", unit_scale=True, disable=not progress, file=sys.stderr)
        conn.execute("BEGIN")
        for i, d in enumerate(draw(runs, seed=seed, days=days, now=now, chunk=chunk)):
            run_cols, act_cols = _columns(d, provenance)
            if i == 0:
                found = mismatches(d, provenance, CHECK_RUNS, (run_cols, act_cols))
                if found:
                    raise RuntimeError(
                        "the vectorised rows differ from rtax.core.record's builders:\n  "
                        + "\n  ".join(found[:20])
                    )
            _insert(conn, "runs", RUN_COLUMNS, run_cols)
            _insert(conn, "actions", ACTION_COLUMNS, act_cols)
            n_actions += len(act_cols["run_id"])
            bar.update(d.index.size)
            bar.set_postfix_str(f"{n_actions:,} actions", refresh=False)
        conn.execute("COMMIT")
        bar.close()
        say.done(f"loaded {runs:,} runs and {n_actions:,} actions")
        for _, sql in indexes:
            conn.execute(sql)
        say.done(f"rebuilt {len(indexes)} indexes")
        conn.execute("PRAGMA journal_mode = WAL")
    finally:
        conn.close()
    # Rows written around `save_rollout` have no summaries yet: the store's repair builds them,
    # as it would for any file written by other means.
    with Store(path) as store:
        rows = store.summaries.rebuild()
    say.done(f"rebuilt {rows:,} summary rows (store.summaries.rebuild)")
    return runs, n_actions


class _Say:
    """Each stage's time on standard error, when asked: this runs for minutes at a year's size."""

    def __init__(self, enabled: bool) -> None:
        self.enabled = enabled
        self.last = time.perf_counter()

    def done(self, what: str) -> None:
        now = time.perf_counter()
        if self.enabled:
            print(f"  {what} in {now - self.last:.1f} s", file=sys.stderr, flush=True)
        self.last = now


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("path", type=Path)
    parser.add_argument("--runs", type=int, default=100_000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--days", type=float, default=7.0, help="the span the runs start over")
    args = parser.parse_args()
    if args.runs < 1 or not args.days > 0:
        parser.error("--runs must be at least 1 and --days above 0")
    t0 = time.perf_counter()
    runs, actions = generate(args.path, args.runs, args.seed, args.days)
    print(
        f"wrote {runs:,} synthetic runs and {actions:,} actions over {args.days:g} days to "
        f"{args.path} in {time.perf_counter() - t0:.1f} s"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
