"""Load runs in-process on the local substrate (rtax.rollouts.burst): a burst is really concurrent,
a staggered run leaves on schedule, a sequential one waits for each rollout, a stop cancels and
cleans up everything, and `rtax burst` stores one load record that matches its rollouts."""

from __future__ import annotations

import itertools
import json
import threading
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from loadcheck import check_load
from polling import DEADLINE_S, wait_for
from rtax import cli
from rtax.core import workloads
from rtax.core.options import RolloutOptions
from rtax.rollouts import burst
from rtax.settings.loads import LoadPlan
from rtax.store.database import Store
from rtax.store.spool import Spool
from rtax.substrates.base import Environment
from rtax.substrates.local import LocalSubstrate


class _Gated(LocalSubstrate):
    """Local, whose creates only go through once `parties` of them are in flight at once:
    a launcher that runs them one after another breaks the barrier (a substrate error)."""

    def __init__(self, *args: Any, parties: int, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.barrier = threading.Barrier(parties, timeout=DEADLINE_S)

    def create(self, run_id: str, *, lifetime_s: float | None = None) -> Environment:
        self.barrier.wait()
        return super().create(run_id, lifetime_s=lifetime_s)


class _Held(LocalSubstrate):
    """Local, whose environments only report running once `release` is set; remembers every
    environment made and every one destroyed."""

    def __init__(self, *args: Any, release: threading.Event, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.release = release
        self.made: list[str] = []
        self.gone: list[str] = []

    def create(self, run_id: str, *, lifetime_s: float | None = None) -> Environment:
        env = super().create(run_id, lifetime_s=lifetime_s)
        self.made.append(env.env_id)
        return env

    def wait_running(self, env: Environment, timeout_s: float) -> None:
        assert self.release.wait(DEADLINE_S), "never released"
        super().wait_running(env, timeout_s)

    def destroy(self, env: Environment, timeout_s: float) -> None:
        super().destroy(env, timeout_s)
        self.gone.append(env.env_id)


def _run(
    sub: LocalSubstrate, plan: LoadPlan, db: Path, **kwargs: Any
) -> tuple[burst.BurstResult, Store]:
    store = Store(db)
    result = burst.BurstResult(db, plan=plan, load_id="L-" + plan.shape)
    spool = Spool(db, lambda: Store(db))
    burst.run(sub, workloads.build(plan.tier), plan, store=store, spool=spool, result=result,
             **kwargs)  # fmt: skip
    return result, store


def test_a_burst_puts_every_create_in_flight_at_once(tmp_path: Path, attrs_fixture) -> None:
    sub = _Gated(root=tmp_path / "envs", template=attrs_fixture.template, parties=8)
    result, store = _run(sub, LoadPlan("local", shape="burst", n=8), tmp_path / "x.db")
    with store:
        assert [r.run["error_message"] for r in result.records if not r.ok] == []
        row = check_load(store, result.load_id)
    assert row["concurrency"] == 8 and row["ok"] == 8
    assert row["shape"] == "burst" and row["n"] == 8 and row["fidelity"] == "real"
    assert sub.leftovers() == []


def test_a_staggered_run_leaves_on_schedule(tmp_path: Path, local: LocalSubstrate) -> None:
    plan = LoadPlan("local", shape="staggered", n=5, every_s=0.2)
    result, store = _run(local, plan, tmp_path / "x.db")
    with store:
        row = check_load(store, result.load_id)
        runs = store.loads.rollouts([result.load_id])
    due = [datetime.fromisoformat(t).timestamp() for t in runs["scheduled_at"]]
    assert [b - a for a, b in itertools.pairwise(due)] == pytest.approx([0.2] * 4, abs=1e-5)
    assert datetime.fromisoformat(runs["scheduled_at"][0]) == datetime.fromisoformat(
        row["started_at"]
    )
    # The schedule is the due times above; the lag is recorded, and bounded only loosely: a
    # loaded machine (CI) starts a thread late, which is what the column is there to show.
    assert row["every_s"] == 0.2 and 0 <= row["dispatch_lag_max_s"] < 5


def test_a_sequential_run_waits_for_each_rollout(tmp_path: Path, local: LocalSubstrate) -> None:
    result, store = _run(local, LoadPlan("local", shape="sequential", n=4), tmp_path / "x.db")
    with store:
        row = check_load(store, result.load_id)
        runs = store.runs.read()
    assert row["concurrency"] == 1
    began = [datetime.fromisoformat(t).timestamp() for t in runs["started_at"]]
    ended = [b + w for b, w in zip(began, runs["wall_s"], strict=True)]
    assert all(b >= e for b, e in zip(began[1:], ended, strict=False))  # never overlapping


def test_a_stop_cancels_every_launch_and_cleans_up(tmp_path: Path, attrs_fixture) -> None:
    """Three rollouts created and held, three more launches not yet due: a stop ends them
    all, every environment made is destroyed, none is stored, the load run says interrupted."""
    release, stop = threading.Event(), threading.Event()
    sub = _Held(root=tmp_path / "envs", template=attrs_fixture.template, release=release)
    plan = LoadPlan("local", shape="staggered", n=6, every_s=0.05)

    def stop_when_held() -> None:
        wait_for(lambda: len(sub.made) >= 3, "three environments made")
        stop.set()

    threading.Thread(target=stop_when_held, daemon=True).start()
    # the rollouts' cancel event is the runner's: the held ones wake when it stops them
    result, store = _run(sub, plan, tmp_path / "x.db", stop=stop, options=RolloutOptions(
        cancel=release, deadline_s=60))  # fmt: skip
    with store:
        row = check_load(store, result.load_id, complete=False)
        assert store.runs.count() == 0
    assert isinstance(result.interrupted, KeyboardInterrupt)
    assert result.abandoned == 0 and result.records == []
    assert row["rollouts"] == 0 and row["n"] == 6
    assert len(sub.made) >= 3 and sorted(sub.gone) == sorted(sub.made)
    assert sub.leftovers() == []


def test_rtax_burst_stores_one_load_record(tmp_path: Path, capsys) -> None:
    db = tmp_path / "x.db"
    assert cli.main(["burst", "--substrate", "local", "-n", "6", "--db", str(db)]) == 0
    out = capsys.readouterr().out
    assert "burst of 6 on local T0" in out and "peak concurrency" in out
    assert "dispatch lag p50" in out and "harness CPU" in out
    with Store(db) as store:
        (load_id,) = store.loads.read()["load_id"]
        row = check_load(store, load_id)
        assert store.runs.count() == 6
    assert json.loads(row["failures"]) == {}
    assert cli.main(["burst", "--substrate", "local", "--shape", "sequential", "-n", "2",
                     "--db", str(db), "--quiet"]) == 0  # fmt: skip
    assert capsys.readouterr().out == ""
    with Store(db) as store:
        assert store.loads.read()["shape"].tolist() == ["burst", "sequential"]


def test_the_callers_own_cancel_ends_the_run_as_a_stop_does(tmp_path: Path, local) -> None:
    """A scheduler that embeds a load run stops it through its rollouts' cancel event."""
    cancel = threading.Event()
    cancel.set()
    plan = LoadPlan("local", shape="staggered", n=3, every_s=0.5)
    result, store = _run(local, plan, tmp_path / "x.db", options=RolloutOptions(cancel=cancel))
    with store:
        row = check_load(store, result.load_id, complete=False)
    assert isinstance(result.interrupted, KeyboardInterrupt) and row["rollouts"] == 0
    assert local.leftovers() == []
