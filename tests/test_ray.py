"""Issue 15's acceptance, on a real Ray cluster of two nodes on this machine (`raycluster`):
the head labelled vantage ``eu``, a worker node labelled ``us``, each with its own environment.

- A burst of 20 ``local`` and 6 ``docker`` rollouts through the scheduler's Ray engine: both
  nodes ran rollouts, every record is stored exactly once with its vantage, the substrate's
  parameter named by ``root_env`` was read from each node's own environment (the scheduler
  does not have it), and nothing leaked.
- The ``us`` node killed mid-burst: its rollouts end as ``engine_error`` rows (kept apart from
  the substrate's success rate), the ``eu`` ones complete, nothing is stored twice, and the
  reaper (run on the surviving node) removes what the lost tasks left.

The cluster is started once for the module and stopped at its end, every process of it.
"""

from __future__ import annotations

import json
import os
import pickle
from collections.abc import Iterator
from pathlib import Path

import pandas as pd
import pytest

from polling import wait_for
from raycluster import Cluster
from rtax.analysis import stats
from rtax.rollouts.engines.base import RolloutSpec
from rtax.rollouts.engines.ray import secrets_in
from rtax.service.scheduler import Scheduler
from rtax.settings import config
from rtax.store.database import Store
from rtax.substrates import kit
from rtax.substrates.local import LABEL_FILE

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Cluster, Path]]:
    roots = tmp_path_factory.mktemp("node-roots")
    nodes = Cluster()
    with pytest.MonkeyPatch.context() as env:
        for name, value in nodes.environ.items():  # as the scheduler joins it
            env.setenv(name, value)
        env.delenv("RAY_ADDRESS", raising=False)
        try:
            nodes.head("eu", env={"RTAX_NODE_ROOT": str(roots / "eu")})
            nodes.add("us", env={"RTAX_NODE_ROOT": str(roots / "us")})
            yield nodes, roots
        finally:
            nodes.stop()  # and asserts that no process of any node is left


def _config(tmp_path: Path, cluster: Cluster, substrates: str) -> config.Config:
    file = tmp_path / "rtax.toml"
    file.write_text(f"""
database = "rtax.db"
[engine]
kind = "ray"
address = "{cluster.address}"
vantages = ["eu", "us"]
[scheduler]
concurrency = 6
deadline = "2m"
reap_interval = "1h"
[metrics]
enabled = false
{substrates}
[[substrates]]
name = "docker"
kind = "docker"
[[plans]]
name = "burst-local"
substrates = ["local"]
tier = "T0"
repeat = 10
interval = "1h"
[[plans]]
name = "burst-docker"
substrates = ["docker"]
tier = "T0"
repeat = 3
interval = "1h"
""")
    return config.load(file)


def _runs(db: Path) -> pd.DataFrame:
    if not db.is_file():
        return pd.DataFrame(columns=["run_id"])
    with Store(db, create=False) as store:
        return store.runs.read()


def _containers(docker_api, run_ids: set[str]) -> list[str]:
    found = docker_api.containers(all=True, filters={"label": kit.RUN_ID})
    return [c["Id"] for c in found if c["Labels"].get(kit.RUN_ID) in run_ids]


def _engine(runs: pd.DataFrame) -> pd.Series:
    return runs["provenance"].map(lambda p: json.loads(p).get("engine", {}))


def test_a_burst_runs_on_both_vantages_and_stores_each_record_once(
    cluster, tmp_path: Path, docker_api, runner_image, monkeypatch
) -> None:
    nodes, roots = cluster
    monkeypatch.delenv("RTAX_NODE_ROOT", raising=False)  # only the nodes have it
    local = (
        '[[substrates]]\nname = "local"\nkind = "local"\nparams = { root_env = "RTAX_NODE_ROOT" }'
    )
    conf = _config(tmp_path, nodes, local)
    spec = RolloutSpec(conf.substrates["local"], "T0")
    for root in ("eu", "us"):  # what the task carries names the variable, not its value
        assert str(roots / root).encode() not in pickle.dumps(spec)
    assert secrets_in(spec) == []

    scheduler = Scheduler(conf)
    scheduler.start()
    try:
        wait_for(lambda: len(_runs(conf.database)) >= 26, "26 stored rollouts", timeout_s=240)
        ids = {n["vantage"]: n["node_id"] for n in scheduler.engine.nodes(fresh=True)}
    finally:
        scheduler.stop(wait=True)
    runs = _runs(conf.database)
    assert len(runs) == 26 and runs["run_id"].nunique() == 26  # each stored exactly once
    assert not scheduler.spool.exists()
    # Every rollout succeeded, or failed only as Docker's exec can under load: exit 0 with no
    # output (moby/moby#27289, classified `output_lost`, docs/measurement.md). That is the
    # engine's failure, stored as one; anything else is rtax's, or the fan-out's.
    failed = runs[(runs["status"] != "ok") & (runs["error_class"] != "output_lost")]
    assert failed.empty, failed[["substrate", "vantage", "error_message"]].to_dict("records")
    lost = runs[runs["error_class"] == "output_lost"]
    assert set(lost["substrate"]) <= {"docker"}, lost[["substrate", "error_message"]]
    by = runs.groupby(["substrate", "vantage"]).size().to_dict()
    assert by == {
        ("docker", "eu"): 3,
        ("docker", "us"): 3,
        ("local", "eu"): 10,
        ("local", "us"): 10,
    }
    # Each ran on the node Ray knows by that vantage's label: both nodes ran rollouts.
    engine = _engine(runs)
    assert sorted(ids) == ["eu", "us"] and ids["eu"] != ids["us"]
    assert (engine.map(lambda e: e["node_id"]) == runs["vantage"].map(ids)).all()
    assert set(engine.map(lambda e: e["kind"])) == {"ray"}
    # `root_env` was read on each node, from its own environment: each made its environments
    # under its own root (and removed them: nothing left).
    for vantage in ("eu", "us"):
        assert (roots / vantage).is_dir(), f"the {vantage} node never used its own root"
        assert list((roots / vantage).glob("rtax-*")) == []
    assert _containers(docker_api, set(runs["run_id"])) == []
    # Two vantages, two series: the same substrate is never merged across them.
    series = set(stats.add_series(runs)["series"])
    assert {"local @ eu", "local @ us", "docker @ eu", "docker @ us"} == series


def _owner_pid(env: Path) -> int | None:
    try:
        owner = json.loads((env / LABEL_FILE).read_text()).get(kit.OWNER, "")
    except (OSError, ValueError):
        return None
    pid = owner.rpartition(":")[2]
    return int(pid) if pid.isdigit() else None


def test_a_node_lost_mid_burst_leaves_engine_errors_and_nothing_else(
    cluster, tmp_path: Path, docker_api, runner_image, attrs_fixture
) -> None:
    nodes, _ = cluster
    envs = tmp_path / "envs"
    # Every command a little slower (rollouts long enough to lose), and saying it is running.
    slow = tmp_path / "slow-sh"
    slow.write_text('#!/bin/sh\n: > .busy\nsleep 0.3\nrm -f .busy\nexec /bin/sh "$@"\n')
    slow.chmod(0o755)
    local = (
        '[[substrates]]\nname = "local"\nkind = "local"\n'
        f'params = {{ root = "{envs}", shell = "{slow}" }}'
    )
    conf = _config(tmp_path, nodes, local)
    us = nodes.node("us")

    def lost_env() -> Path | None:
        """An environment that a task on the us node is running a command in now (not one
        half removed by its cleanup)."""
        for env in envs.glob("rtax-*"):
            if not (env / ".busy").exists():
                continue
            pid = _owner_pid(env)
            if pid is not None and us.owns(pid):
                return env
        return None

    scheduler = Scheduler(conf)
    scheduler.start()
    try:
        orphan = wait_for(lost_env, "a rollout in flight on the us node")
        us.kill()
        wait_for(lambda: len(_runs(conf.database)) >= 26, "26 stored rollouts", timeout_s=240)
        runs = _runs(conf.database)
        assert orphan.is_dir()  # what the lost task created is still there...
        scheduler.run_reaper()  # ...until the reaper (on the surviving node) removes it
        assert not orphan.exists()
        assert list(envs.glob("rtax-*")) == []
        assert _containers(docker_api, set(runs["run_id"])) == []
    finally:
        scheduler.stop(wait=True)
    assert len(_runs(conf.database)) == 26 and runs["run_id"].nunique() == 26  # none twice
    eu, lost = runs[runs["vantage"] == "eu"], runs[runs["vantage"] == "us"]
    assert (eu["status"] == "ok").all() and len(eu) == 13  # the rest complete
    assert set(lost["error_class"].fillna("ok")) <= {"ok", "engine_error"}
    failed = lost[lost["error_class"] == "engine_error"]
    assert len(failed) >= 1 and failed["error_message"].str.len().gt(0).all()
    assert orphan.name.removeprefix("rtax-") in set(failed["run_id"])  # its rollout: a row
    # The engine's failures are rtax's: they never lower the substrates' success rate.
    assert stats.success_rate(runs) == 1.0
    assert os.environ.get("RTAX_NODE_ROOT") is None
