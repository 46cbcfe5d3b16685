"""The restore and resume launch paths (rtax.substrates.restore, the paused warm pool) on the
real Docker engine, runc and gVisor: the whole substrate contract through each, the state check
failing on a snapshot made stale on purpose, a clear "not supported" where the runtime can't,
and nothing left behind (no container, no checkpoint folder, no committed image).

Why the contract again: a path is only measured if a rollout on it does all a cold one does
(T0-T2, trajectories, every action form, timeouts, failures, cleanup) with its phases adding
up; the state check is what makes a fast restore also a correct one."""

from __future__ import annotations

import contextlib
import dataclasses
import shutil
import subprocess
import sys
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

import engine
from contract import SubstrateContract, assert_phases_add_up
from polling import deadline_s
from rtax.assets.attrs import Fixture
from rtax.core import workloads
from rtax.core.kinds import NAMED
from rtax.core.workloads import RepoSource
from rtax.rollouts.rollout import run_rollout
from rtax.settings.pool import PoolSettings
from rtax.store.database import Store
from rtax.substrates import kit
from rtax.substrates.docker.snapshot import containerd_temp_dirs, unpacked_copies
from rtax.substrates.docker.substrate import SNAPSHOT_REPOSITORY, DockerSubstrate
from rtax.substrates.local import LocalSubstrate
from rtax.substrates.pool import WarmPool
from rtax.substrates.reaper import reap
from rtax.substrates.restore import SEED_DIR, Restorer

pytestmark = pytest.mark.usefixtures("runner_image")

NAME = "contract-paths"


@pytest.fixture
def repo_source(docker_repo_source: RepoSource) -> RepoSource:
    return docker_repo_source


def _docker(gvisor: bool, mode: str = "exec") -> DockerSubstrate:
    params = dict(NAMED["docker-gvisor"][1]) if gvisor else {}
    return DockerSubstrate(name=NAME, mode=mode, **params)


def _left() -> str:
    """This test's containers and committed snapshot images still on the engine (a committed
    image keeps its container's labels: only this test's are counted, so a scheduler
    restoring on the same engine meanwhile is not a leak of this test's, and neither is what
    an earlier, killed run left: tests/engine.py)."""
    mine = f"label={kit.SUBSTRATE}={NAME}"
    return engine.new("ps", "-aq", "--filter", mine) + engine.new(
        "images", "-q", "--filter", mine, SNAPSHOT_REPOSITORY
    )


def _unpacked() -> set[Path]:
    """containerd's unpacked copies of rtax's restores on this host (containerd keeps one per
    restore: `rtax.substrates.docker.snapshot.remove_unpacked`)."""
    return set(unpacked_copies(None, containerd_temp_dirs()))


@contextlib.contextmanager
def _restorer(gvisor: bool, mode: str = "exec") -> Iterator[Restorer]:
    restorer = Restorer(_docker(gvisor, mode))
    folder = restorer.folder
    before = _unpacked()  # an earlier, killed run's are not this test's
    try:
        yield restorer
    finally:
        restorer.close()
    assert not Path(folder).exists(), "the snapshots' folder outlived the restore path"
    assert _left() == ""
    assert _unpacked() - before == set(), "containerd's copy of a restore outlived it"


@contextlib.contextmanager
def _paused(gvisor: bool) -> Iterator[WarmPool]:
    pool = WarmPool(_docker(gvisor), PoolSettings(2, 1), rollout_lifetime_s=3600 + 120, paused=True)
    try:
        pool.prepare(lambda _: None)
        yield pool
    finally:
        pool.close()
    assert _left() == ""


class TestRestoreDockerContract(SubstrateContract):
    @pytest.fixture
    def substrate(self) -> Iterator[Restorer]:
        with _restorer(gvisor=False) as made:
            yield made


class TestRestoreDockerSessionContract(SubstrateContract):
    @pytest.fixture
    def substrate(self) -> Iterator[Restorer]:
        with _restorer(gvisor=False, mode="session") as made:
            yield made


class TestRestoreGvisorContract(SubstrateContract):
    """gVisor's checkpointable runtime has no network (runsc refuses to checkpoint a sandbox
    on the host's): T2's snapshot source clones a copy of the fixture made inside it
    (`Restorer.seed`), as the composition arranges for every restore path like it."""

    @pytest.fixture
    def substrate(self, gvisor: None) -> Iterator[Restorer]:
        with _restorer(gvisor=True) as made:
            yield made

    @pytest.fixture
    def repo_source(
        self, substrate: Restorer, docker_repo_source: RepoSource, attrs_fixture: Fixture
    ) -> RepoSource:
        seeded = substrate.seed(attrs_fixture.bare_repo)
        assert seeded == f"{SEED_DIR}/{attrs_fixture.bare_repo.name}"
        return dataclasses.replace(docker_repo_source, url=f"file://{seeded}")


def test_gvisor_restores_t2_from_a_copy_of_the_fixture_and_refuses_a_clone_over_the_network(
    gvisor: None, docker_repo_source: RepoSource, attrs_fixture: Fixture
) -> None:
    """Cloning over git:// can't run without a network: refused before any rollout starts,
    with the reason, as ``not_supported``. Seeded, the snapshot holds the clone and not the
    copy it was made from (removed before the checkpoint)."""
    with _restorer(gvisor=True) as restorer:
        refused = run_rollout(restorer, workloads.build("T2", source=docker_repo_source)).run
        assert refused["status"] == "failed"
        assert refused["error_class"] == "not_supported", refused
        assert "--network=none" in refused["error_message"]
        assert refused["wall_s"] is None  # nothing was made: no phase to add up
        seeded = restorer.seed(attrs_fixture.bare_repo)
        source = dataclasses.replace(docker_repo_source, url=f"file://{seeded}")
        record = run_rollout(restorer, workloads.build("T2", source=source))
        assert record.ok, record.run
        assert restorer.snapshots["T2"]["seeded"] == [attrs_fixture.bare_repo.name]
        env = restorer.inner.restore(
            restorer.snapshots["T2"], "contract-paths-seed-check", lifetime_s=600
        )
        try:
            found = restorer.inner.run(env, f"test -d repo/.git && ! test -e {SEED_DIR}", 60)
            assert found.exit_code == 0, found
        finally:
            restorer.inner.destroy(env, 120)


class TestResumeDockerContract(SubstrateContract):
    @pytest.fixture
    def substrate(self) -> Iterator[WarmPool]:
        with _paused(gvisor=False) as made:
            yield made


class TestResumeGvisorContract(SubstrateContract):
    @pytest.fixture
    def substrate(self, gvisor: None) -> Iterator[WarmPool]:
        with _paused(gvisor=True) as made:
            yield made


@pytest.mark.parametrize("gvisor", [False, True], ids=["runc", "gvisor"])
def test_a_stale_snapshot_fails_its_state_check_as_restore_corrupt(
    gvisor: bool, request: pytest.FixtureRequest
) -> None:
    """A snapshot whose state is not what was recorded for it (here the value its first
    process held, changed after it was taken): the restored environment runs, its first
    command succeeds, and the rollout fails as ``restore_corrupt`` with both halves named."""
    if gvisor:
        request.getfixturevalue("gvisor")
    with _restorer(gvisor) as restorer:
        t0 = workloads.build("T0")
        good = run_rollout(restorer, t0)
        assert good.ok, good.run
        assert_phases_add_up(good)
        assert good.run["launch_type"] == "restore" and good.run["restore_s"] > 0
        snapshot = restorer.snapshots["T0"]
        snapshot["memory_token"] = "0" * 16  # what it holds no longer matches
        stale = run_rollout(restorer, t0)
        assert stale.run["status"] == "failed"
        assert stale.run["error_class"] == "restore_corrupt", stale.run
        assert "memory=" in stale.run["error_message"]
        assert stale.run["time_to_first_command_s"] is not None  # it ran, and lost its state
        assert stale.run["cleanup_ok"] == 1


@pytest.mark.parametrize("gvisor", [False, True], ids=["runc", "gvisor"])
def test_the_reaper_thaws_a_frozen_leftover_whose_pool_is_gone(
    gvisor: bool, request: pytest.FixtureRequest
) -> None:
    """A resume pool's paused environment whose pool died without closing: a reaper with a
    substrate of its own (nothing of the pool's memory of what it froze) finds it listed
    paused, thaws it and removes it, with no error, once its expiry has passed. A frozen
    gVisor sandbox can't be killed, and a forced removal tried first leaves a zombie."""
    if gvisor:
        request.getfixturevalue("gvisor")
    pool = _docker(gvisor)
    env = pool.create("pool-crashed", lifetime_s=60)
    pool.wait_running(env, 60)
    pool.pause(env)  # what a resume pool leaves when its process dies
    reaper = _docker(gvisor)
    later = datetime.now(UTC) + timedelta(hours=2)  # past its expiry: an orphan
    try:
        (found,) = reap([reaper], dry_run=True, now=later)
        assert found.leftover.env_id == env.env_id and found.leftover.frozen
        done = reap([reaper], now=later)
        assert [o.error for o in done] == [None]
    finally:
        with contextlib.suppress(Exception):
            pool.unpause(env)
        with contextlib.suppress(Exception):
            pool.destroy(env, 60)
        pool.close()
        reaper.close()
    assert _left() == ""


def test_the_reaper_removes_containerd_copy_of_a_crashed_restore() -> None:
    """A restored container whose rollout died before its cleanup: the reaper, which finds it
    by its label and knows nothing of the restore, removes it and the copy of its checkpoint
    containerd unpacked to restore from (containerd never removes it)."""
    with _restorer(gvisor=False) as restorer:
        assert run_rollout(restorer, workloads.build("T0")).ok  # makes the snapshot
        run_id = "contract-paths-crashed"
        env = restorer.inner.restore(restorer.snapshots["T0"], run_id, lifetime_s=60)
        reaper = _docker(False)
        try:
            (copy,) = unpacked_copies({run_id}, containerd_temp_dirs())
            later = datetime.now(UTC) + timedelta(hours=2)  # past its expiry: an orphan
            done = reap([reaper], now=later)
            assert [(o.leftover.env_id, o.error) for o in done] == [(env.env_id, None)]
            assert not copy.exists()
        finally:
            with contextlib.suppress(Exception):
                restorer.inner.destroy(env, 60)
            reaper.close()


@pytest.mark.parametrize("removed", ["image", "checkpoint"])
def test_a_snapshot_removed_outside_rtax_fails_one_rollout_and_is_made_again(
    removed: str,
) -> None:
    """Someone prunes the snapshot's committed image, or its checkpoint folder: the next
    restore fails as ``create_failed`` saying the snapshot is gone (kept, classified), and
    the one after it makes a new snapshot and runs, instead of every restore failing until
    a restart."""
    with _restorer(gvisor=False) as restorer:
        t0 = workloads.build("T0")
        assert run_rollout(restorer, t0).ok
        first = restorer.snapshots["T0"]
        if removed == "image":
            subprocess.run(["docker", "rmi", "-f", first["image"]], check=True, capture_output=True)
        else:
            shutil.rmtree(first["dir"])
        gone = run_rollout(restorer, t0).run
        assert gone["status"] == "failed" and gone["error_class"] == "create_failed", gone
        assert "gone" in gone["error_message"]
        again = run_rollout(restorer, t0)
        assert again.ok, again.run
        assert restorer.snapshots["T0"]["snapshot_id"] != first["snapshot_id"]


def test_a_kind_that_cannot_snapshot_is_refused_up_front() -> None:
    """`local` has no snapshots: the restore path says so when it is built, not as a slow
    failure later."""
    with pytest.raises(Exception, match="can't snapshot") as caught:
        Restorer(LocalSubstrate())
    assert getattr(caught.value, "error_class", None) == "not_supported"


def test_rtax_fork_compares_a_group_restored_from_one_snapshot_with_cold_and_warm(
    tmp_path: Path,
) -> None:
    """`rtax fork --group 3` on docker: three load runs (cold, warm, restore) of 3 rollouts
    each, all ok and linked, the restores from one snapshot (one row in snapshots), and
    nothing left on the engine."""
    db = tmp_path / "fork.db"
    done = subprocess.run(
        [sys.executable, "-m", "rtax", "fork", "--substrate", "docker", "-g", "3", "--db", str(db)],
        capture_output=True,
        text=True,
        timeout=deadline_s(600),
    )
    assert done.returncode == 0, done.stderr
    assert "fork of 3" in done.stdout and "restore" in done.stdout
    with Store(db, create=False) as store:
        loads = store.loads.read()
        runs = store.runs.read()
        snapshots = store.snapshots.read()
    assert sorted(loads["launch_type"]) == ["cold", "restore", "warm"]
    assert (loads["rollouts"] == 3).all() and (loads["ok"] == 3).all()
    assert loads["time_to_all_ready_s"].notna().all()
    by_load = runs.merge(loads[["load_id", "launch_type"]], on="load_id", suffixes=("", "_load"))
    assert (by_load["launch_type"] == by_load["launch_type_load"]).all()
    assert len(snapshots) == 1 and snapshots.iloc[0]["tier"] == "T0"
    assert engine.new("ps", "-aq", "--filter", f"label={kit.SUBSTRATE}=docker") == ""


def test_the_docs_table_of_kinds_and_paths_is_what_each_kind_implements() -> None:
    """docs/measurement.md#launch-paths says which kind has restore (`Snapshots`), resume
    (`Pauses`) and idle memory (`Weighs`); each row is what the kind's class implements."""
    from rtax.core.kinds import SUBSTRATES
    from rtax.substrates import substrate_class
    from rtax.substrates.base import Pauses, Snapshots, Weighs

    text = (Path(__file__).resolve().parent.parent / "docs" / "measurement.md").read_text()
    rows = {}
    for line in text.splitlines():
        cells = [c.strip() for c in line.strip("|").split("|")]
        if len(cells) == 5 and cells[0].startswith("`") and cells[0].strip("`") in SUBSTRATES:
            rows[cells[0].strip("`")] = [c.startswith("yes") for c in cells[1:]]
    assert sorted(rows) == sorted(SUBSTRATES)
    for kind, (warm, restore, resume, memory) in rows.items():
        cls = substrate_class(kind)
        assert warm, kind  # the pool is written against the protocol
        assert restore == issubclass(cls, Snapshots), kind
        assert resume == issubclass(cls, Pauses), kind
        assert memory == issubclass(cls, Weighs), kind
