"""A synthetic rtax database for render benchmarks: realistic shapes, clearly not measurements.

Why: the dashboard must stay fast over months of probes (100,000 runs, 2,000,000 actions), and
no one should wait months to check that. Every row made here is marked as synthetic three ways,
so it can never pass for data: fidelity ``modelled``, host ``synthetic``, and
``"synthetic": true`` in its provenance. It refuses to write to the embedded default database.

    python benchmarks/synthetic.py /tmp/big.db --runs 100000
"""

from __future__ import annotations

import argparse
import sqlite3
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np

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


def generate(path: Path, runs: int, seed: int = 0, days: float = 7.0) -> tuple[int, int]:
    """Write `runs` synthetic runs and their actions to a new database at `path`."""
    if path.resolve() == paths.default_db().resolve():
        raise SystemExit(f"refusing to write synthetic data to {path}")
    if path.exists():
        path.unlink()
    Store(path).close()  # the real schema, migrations included
    rng = np.random.default_rng(seed)
    profiles = list(PROFILES)
    shares = np.array([w[2] for w in WORKLOADS])
    now = datetime.now(UTC)
    start = now - timedelta(days=days)
    offsets = np.sort(rng.uniform(0, days * 86400, runs))
    conn = sqlite3.connect(path, isolation_level=None)
    run_sql = (
        f"INSERT INTO runs ({','.join(RUN_COLUMNS)}) VALUES ({','.join('?' * len(RUN_COLUMNS))})"
    )
    act_sql = (
        f"INSERT INTO actions ({','.join(ACTION_COLUMNS)}) "
        f"VALUES ({','.join('?' * len(ACTION_COLUMNS))})"
    )
    provenance = {
        "synthetic": True,
        "generator": "benchmarks/synthetic.py",
        "seed": seed,
        "host": "synthetic",
        "rtax_version": f"{__version__}+synthetic",
        "substrate": {"endpoint": "synthetic://"},
    }
    n_actions = 0
    conn.execute("BEGIN")
    run_rows, act_rows = [], []
    for i in range(runs):
        substrate, mode = profiles[i % len(profiles)]
        create_m, orch_m, ready_m, action_m, clone_m = PROFILES[(substrate, mode)]
        tier, steps, _ = WORKLOADS[rng.choice(len(WORKLOADS), p=shares)]
        n = steps or FIXED_ACTIONS[tier]
        lat = rng.lognormal(np.log(action_m), 0.6, n)
        create, orch, ready = (rng.lognormal(np.log(m), 0.3) for m in (create_m, orch_m, ready_m))
        setup = rng.lognormal(np.log(clone_m), 0.2) if tier == "T2" else 0.0
        cleanup = rng.lognormal(np.log(max(orch_m / 2, 0.002)), 0.2)
        overhead = rng.uniform(2e-5, 2e-4) + 1e-5 * n
        failed = rng.random() < 0.02
        actions_s = float(lat.sum())
        episode = create + orch + ready + setup + actions_s
        wall = episode + cleanup + overhead
        run_id = uuid.UUID(int=int(rng.integers(0, 2**63)) << 64 | i).hex
        started = start + timedelta(seconds=float(offsets[i]))
        error_class = str(rng.choice(ERRORS)) if failed else None

        t = create + orch
        actions = [_command(run_id, 0, "ready", 0, "true", t, ready)]
        t += ready
        seq = 1
        if tier == "T2":
            actions.append(_command(run_id, seq, "setup", 0, "synthetic clone", t, setup))
            seq, t = seq + 1, t + setup
        for k in range(n):
            actions.append(_command(run_id, seq + k, "action", k, "synthetic", t, float(lat[k])))
            t += float(lat[k])
        # The one run-row builder (rtax.core.record): overhead, time to first command and the rest
        # are derived exactly as for a measured rollout.
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
            RolloutIdentity(
                substrate, substrate.split("-")[0], "modelled", tier, steps, mode=mode, n_actions=n
            ),
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
        run_rows.append([run[c] for c in RUN_COLUMNS])
        act_rows.extend([a[c] for c in ACTION_COLUMNS] for a in actions)
        n_actions += n + seq
        if len(act_rows) > 200_000:
            conn.executemany(run_sql, run_rows)
            conn.executemany(act_sql, act_rows)
            run_rows, act_rows = [], []
    conn.executemany(run_sql, run_rows)
    conn.executemany(act_sql, act_rows)
    conn.execute("COMMIT")
    conn.close()
    # Rows written around `save_rollout` have no summaries yet: the store's repair builds them,
    # as it would for any file written by other means.
    with Store(path) as store:
        store.summaries.rebuild()
    return runs, n_actions


def _command(
    run_id: str, seq: int, phase: str, idx: int, command: str, t: float, latency: float
) -> dict[str, Any]:
    """A successful synthetic command row, through the record's one action-row builder."""
    return action_row(
        run_id=run_id,
        seq=seq,
        phase=phase,
        idx=idx,
        category="exec" if phase == "action" else phase,
        command=command,
        exit_code=0,
        latency_s=latency,
        exec_s=latency,
        t_offset_s=t,
        stdout_bytes=3 if phase == "action" else 0,
        stderr_bytes=0,
        ok=1,
    )


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("path", type=Path)
    parser.add_argument("--runs", type=int, default=100_000)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    runs, actions = generate(args.path, args.runs, args.seed)
    print(f"wrote {runs:,} synthetic runs and {actions:,} actions to {args.path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
