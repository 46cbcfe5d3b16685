"""The restore and resume launch paths on the daytona substrate, through the real `daytona` SDK
against the local Daytona emulation over real HTTP (every sandbox a real container, a snapshot a
real ``docker commit``, a pause a real ``docker pause``): the whole substrate contract through
each path, the state check failing on a snapshot made stale on purpose, the file-only check and
its provenance, a snapshot that fails, the routes as the SDK calls them, and nothing left on the
engine afterwards (no container, no committed image, no snapshot in the API).

Why the contract again: a path is only measured if a rollout on it does all a cold one does,
with its phases adding up (tests/test_launch_paths.py runs the same on Docker). Why the file-only
check is tested apart: Daytona's snapshots keep files, not memory, and the check must ask for
what they keep and say so, never pass a memory half it could not have checked."""

from __future__ import annotations

import contextlib
import json
import subprocess
from collections.abc import Iterator

import pytest

from contract import SubstrateContract, assert_phases_add_up
from polling import DEADLINE_S, wait_for
from rtax.core import workloads
from rtax.core.workloads import RepoSource
from rtax.emulation.daytona import DaytonaEmulation
from rtax.emulation.daytona.snapshots import SNAPSHOT_REPOSITORY
from rtax.rollouts.rollout import run_rollout
from rtax.settings import config
from rtax.settings.pool import PoolSettings
from rtax.substrates import get_substrate, kit, state
from rtax.substrates.base import Pauses, Snapshots, Weighs, snapshot_keeps_memory
from rtax.substrates.daytona import DaytonaSubstrate
from rtax.substrates.daytona.client import status
from rtax.substrates.docker.substrate import DockerSubstrate
from rtax.substrates.pool import WarmPool
from rtax.substrates.restore import FILE_ONLY, Restorer, state_check

NAME = "daytona-paths"
BACKING = "daytona-emulation"


@pytest.fixture(scope="module")
def emulation(runner_image: str) -> Iterator[DaytonaEmulation]:
    with DaytonaEmulation(image=runner_image) as emu:
        yield emu


@pytest.fixture(autouse=True)
def _no_faults_left(request: pytest.FixtureRequest) -> Iterator[None]:
    """Faults are planted per test; none outlives it."""
    yield
    if "emulation" in request.fixturenames:
        request.getfixturevalue("emulation").faults.clear()


@pytest.fixture
def repo_source(docker_repo_source: RepoSource) -> RepoSource:
    return docker_repo_source


def _substrate(emu: DaytonaEmulation, mode: str = "exec") -> DaytonaSubstrate:
    params = {**emu.substrate_params(), "rate_limit_base_s": 0.01}
    sub = get_substrate("daytona", name=NAME, mode=mode, **params)
    assert isinstance(sub, DaytonaSubstrate)
    return sub


def _docker(*args: str) -> str:
    return subprocess.run(["docker", *args], capture_output=True, text=True, check=True).stdout


def _left_on_engine() -> str:
    """This process's emulated sandboxes' containers and committed snapshot images still on
    the engine (a concurrent run's, owned by another process, are not counted)."""
    mine = f"label={kit.OWNER}={kit.owner()}"
    containers = _docker(
        "ps", "-aq", "--filter", f"label={kit.SUBSTRATE}={BACKING}", "--filter", mine
    )
    images = _docker(
        "images", "-q", "--filter", f"reference={SNAPSHOT_REPOSITORY}", "--filter", mine
    )
    return containers + images


def _committed(emu: DaytonaEmulation) -> list[str]:
    """The snapshots the emulation made from sandboxes (and still has), and the images it has
    yet to remove."""
    store = emu.state.store
    return [n for n, s in store.by_name.items() if s.committed] + list(store.doomed)


def _live(emu: DaytonaEmulation) -> list[str]:
    """The states of this test's sandboxes the emulation still has (one verified deleted may
    linger a moment as ``destroyed``: it is gone)."""
    return [
        s.state
        for s in list(emu.sandboxes.values())
        if s.body["labels"].get(kit.SUBSTRATE) == NAME and s.state != "destroyed"
    ]


@contextlib.contextmanager
def _restorer(emu: DaytonaEmulation, mode: str = "exec") -> Iterator[Restorer]:
    restorer = Restorer(_substrate(emu, mode))
    try:
        yield restorer
    finally:
        restorer.close()
    # its snapshots deleted through the SDK, their images removed with them, synchronously
    assert _committed(emu) == []
    assert _live(emu) == []
    assert _left_on_engine() == ""


@contextlib.contextmanager
def _paused(emu: DaytonaEmulation) -> Iterator[WarmPool]:
    pool = WarmPool(_substrate(emu), PoolSettings(2, 1), rollout_lifetime_s=3600 + 120, paused=True)
    try:
        pool.prepare(lambda _: None)
        yield pool
    finally:
        pool.close()
    assert _live(emu) == []  # no paused sandbox outlived its pool
    assert _left_on_engine() == ""


class TestRestoreDaytonaContract(SubstrateContract):
    @pytest.fixture
    def substrate(self, emulation: DaytonaEmulation) -> Iterator[Restorer]:
        with _restorer(emulation) as made:
            yield made


class TestRestoreDaytonaSessionContract(SubstrateContract):
    @pytest.fixture
    def substrate(self, emulation: DaytonaEmulation) -> Iterator[Restorer]:
        with _restorer(emulation, mode="session") as made:
            yield made


class TestResumeDaytonaContract(SubstrateContract):
    @pytest.fixture
    def substrate(self, emulation: DaytonaEmulation) -> Iterator[WarmPool]:
        with _paused(emulation) as made:
            yield made


# -- the state check: what a filesystem snapshot keeps ---------------------------------------------


def test_daytona_snapshots_say_they_keep_no_memory(emulation: DaytonaEmulation) -> None:
    """The kind speaks the launch paths' protocols, and says its snapshots keep the files
    alone; a kind that says nothing (Docker's checkpoints) is checked on both halves."""
    sub = _substrate(emulation)
    try:
        assert isinstance(sub, Snapshots) and isinstance(sub, Pauses) and isinstance(sub, Weighs)
        assert snapshot_keeps_memory(sub) is False
    finally:
        sub.close()
    assert snapshot_keeps_memory(DockerSubstrate.__new__(DockerSubstrate)) is True
    assert snapshot_keeps_memory(object()) is True


def test_the_file_only_check_signals_no_process() -> None:
    """The file-only check reads the file and nothing else: PID 1 of a sandbox is not rtax's
    holder, and a stray SIGUSR1 could end it."""
    check = state_check({"state_check": FILE_ONLY, "file_token": "abc", "memory_token": None})
    assert check.command == state.check_file_command()
    assert "kill" not in check.command and "memory" not in check.command
    assert check.expect_stdout == "file=abc"
    both = state_check({"file_token": "abc", "memory_token": "def"})  # older snapshots: both
    assert both.expect_stdout == "file=abc memory=def"


def test_a_restore_checks_the_file_and_says_so(emulation: DaytonaEmulation, store) -> None:
    """A restore rollout on daytona: its set-up is the file-only check, its launch provenance
    names it (``state_check: file``), and the sandbox was created from the snapshot the SDK's
    ``create_snapshot`` made, through the routes it calls."""
    with _restorer(emulation) as restorer:
        record = run_rollout(restorer, workloads.build("T0"))
        assert record.ok, record.run
        assert_phases_add_up(record)
        assert record.run["launch_type"] == "restore" and record.run["restore_s"] > 0
        assert record.run["fidelity"] == "emulated"
        (check,) = [a for a in record.actions if a["phase"] == "setup"]
        assert check["command"] == state.check_file_command()
        store.save_rollout(record)
        kept = json.loads(store.runs.read().iloc[0]["provenance"])
        snap = restorer.snapshots["T0"]
        assert kept["launch"]["state_check"] == "file"
        assert kept["launch"]["snapshot_id"] == snap["snapshot_id"]
        assert snap["memory_token"] is None  # nothing held it: none recorded
        assert snap["size_bytes"] > 0
        name = snap["snapshot"]
        body = next(
            b for b in emulation.create_bodies if b["name"] == f"rtax-{record.run['run_id']}"
        )
        assert body["snapshot"] == name
        routes = [r[0] for r in emulation.requests]
        assert "sandbox_snapshot" in routes and "snapshot_get" in routes
    assert "snapshot_delete" in [r[0] for r in emulation.requests]
    assert name not in emulation.state.store.by_name


def test_a_stale_snapshot_fails_its_state_check_as_restore_corrupt(
    emulation: DaytonaEmulation,
) -> None:
    """A snapshot whose file is not what was recorded for it: the restored sandbox runs, its
    first command succeeds, and the rollout fails as ``restore_corrupt`` naming the file half.
    The memory half is not asked for at all, so changing it changes nothing."""
    with _restorer(emulation) as restorer:
        t0 = workloads.build("T0")
        good = run_rollout(restorer, t0)
        assert good.ok, good.run
        snapshot = restorer.snapshots["T0"]
        snapshot["memory_token"] = "0" * 16  # not checked: the snapshot kept no memory
        still = run_rollout(restorer, t0)
        assert still.ok, still.run
        snapshot["file_token"] = "0" * 16  # what it holds no longer matches
        stale = run_rollout(restorer, t0)
        assert stale.run["status"] == "failed"
        assert stale.run["error_class"] == "restore_corrupt", stale.run
        assert "file=" in stale.run["error_message"]
        assert stale.run["time_to_first_command_s"] is not None  # it ran, and lost its state
        assert stale.run["cleanup_ok"] == 1


def test_a_snapshot_that_fails_fails_the_restore_before_its_clock(
    emulation: DaytonaEmulation,
) -> None:
    """A commit that fails (the snapshot in ``error``, the sandbox back to started): the SDK's
    call returns, the substrate finds the snapshot failed, deletes it, and the rollout fails as
    ``create_failed`` with the reason before any phase starts; nothing is left (the restore
    path's own check: no snapshot, no image, no sandbox)."""
    emulation.faults.fail("snapshot", message="disk full on the runner")
    deletes = len(emulation.requests_for("snapshot_delete"))
    with _restorer(emulation) as restorer:
        record = run_rollout(restorer, workloads.build("T0"))
        assert record.run["status"] == "failed"
        assert record.run["error_class"] == "create_failed", record.run
        assert "disk full on the runner" in record.run["error_message"]
        assert record.run["wall_s"] is None  # refused before the clock started
        assert restorer.snapshots == {}
        assert len(emulation.requests_for("snapshot_delete")) == deletes + 1


# -- what the routes do -------------------------------------------------------------------------


def test_pause_and_start_freeze_and_thaw_the_container(emulation: DaytonaEmulation) -> None:
    """The SDK's pause leaves the sandbox ``paused`` with its container frozen (the engine says
    so), a toolbox call is refused meanwhile, and start brings both back; the pool's weight of
    a paused sandbox is None (its daemon can't answer), of a running one the daemon's."""
    sub = _substrate(emulation)
    env = sub.create("pause-check", lifetime_s=600)
    try:
        sub.wait_running(env, DEADLINE_S)
        assert (sub.memory_bytes(env) or 0) > 0
        container = emulation.sandboxes[env.env_id].env
        assert container is not None
        sub.pause(env)
        assert _docker("inspect", "-f", "{{.State.Status}}", container.env_id).strip() == "paused"
        assert sub.memory_bytes(env) is None
        (listed,) = [lo for lo in sub.leftovers() if lo.run_id == "pause-check"]
        assert listed.frozen
        sub.unpause(env)
        assert _docker("inspect", "-f", "{{.State.Status}}", container.env_id).strip() == "running"
        assert sub.run(env, "echo thawed", 30).stdout == "thawed\n"
        states = [e[2] for e in emulation.events if e[1] == env.env_id and e[2]]
        assert states[-4:] == ["pausing", "paused", "resuming", "started"]
    finally:
        sub.destroy(env, 60)
        sub.close()


def test_a_paused_sandbox_is_deleted_as_it_is(emulation: DaytonaEmulation) -> None:
    """A paused sandbox deleted without a start (the reaper's case: its pool is gone): the
    emulation thaws its container and removes it, and the delete is verified."""
    sub = _substrate(emulation)
    env = sub.create("pause-delete", lifetime_s=600)
    try:
        sub.wait_running(env, DEADLINE_S)
        sub.pause(env)
    finally:
        sub.destroy(env, 60)
        sub.close()
    assert _left_on_engine() == ""


def test_fork_clones_the_file_system(emulation: DaytonaEmulation) -> None:
    """The SDK's ``fork``: a new sandbox with the source's files, the source started again,
    and the image committed for the fork removed with it."""
    sub = _substrate(emulation)
    env = sub.create("fork-source", lifetime_s=600)
    forked = None
    try:
        sub.wait_running(env, DEADLINE_S)
        assert sub.run(env, "echo kept > /work/forked-file", 30).exit_code == 0
        forked = env.handle["sandbox"].fork(name="rtax-fork-check", timeout=DEADLINE_S)
        assert forked.state.value == "started"
        assert forked.process.exec("cat /work/forked-file").result == "kept\n"
        assert emulation.sandboxes[env.env_id].state == "started"
        assert emulation.sandboxes[forked.id].own_image is not None
    finally:
        if forked is not None:
            forked.delete(wait=True)
        sub.destroy(env, 60)
        sub.close()
    wait_for(lambda: _committed(emulation) == [], "the fork's image to be removed")
    assert _left_on_engine() == ""


def test_snapshot_routes_answer_as_daytona_does(emulation: DaytonaEmulation) -> None:
    """Through the SDK: a snapshot name taken twice is refused (409), a memory snapshot of a
    container sandbox is refused (400), a sandbox can't be created from a snapshot that is
    gone (404), and a deleted snapshot answers 404."""
    from daytona import CreateSandboxFromSnapshotParams
    from daytona_api_client import CreateSandboxSnapshot

    sub = _substrate(emulation)
    sdk = sub.client()
    env = sub.create("snapshot-routes", lifetime_s=600)
    try:
        sub.wait_running(env, DEADLINE_S)
        sandbox = env.handle["sandbox"]
        sandbox.create_snapshot("rtax-route-check", timeout=DEADLINE_S)
        made = sdk.snapshot.get("rtax-route-check")
        assert made.state.value == "active" and made.source_sandbox_id == env.env_id
        with pytest.raises(Exception) as taken:
            sandbox.create_snapshot("rtax-route-check", timeout=DEADLINE_S)
        assert status(taken.value) == 409
        with pytest.raises(Exception) as memory:
            sdk._sandbox_api.create_sandbox_snapshot(
                env.env_id, CreateSandboxSnapshot(name="rtax-memory", include_memory=True)
            )
        assert status(memory.value) == 400
        sdk.snapshot.delete("rtax-route-check")
        with pytest.raises(Exception) as gone:
            sdk.snapshot.get("rtax-route-check")
        assert status(gone.value) == 404
        with pytest.raises(Exception) as refused:
            sdk.create(CreateSandboxFromSnapshotParams(snapshot="rtax-route-check"), timeout=60)
        assert status(refused.value) == 404
    finally:
        sub.destroy(env, 60)
        sub.close()
    assert _committed(emulation) == []


def test_nothing_is_left_once_an_emulation_stops(runner_image: str) -> None:
    """An emulation stopped with a snapshot still registered and a sandbox paused (no client
    cleaned up): its containers and committed images are all removed by its stop."""
    with DaytonaEmulation(image=runner_image) as emu:
        sub = _substrate(emu)
        try:
            env = sub.create("left-running", lifetime_s=600)
            sub.wait_running(env, DEADLINE_S)
            sub.snapshot(env, "/var/tmp/rtax-left-snapshot")
            sub.pause(env)
            assert _committed(emu) != [] and _left_on_engine() != ""
        finally:
            sub.close()
    assert _left_on_engine() == ""


def test_a_dead_emulations_snapshot_images_are_removed_by_the_next(
    runner_image: str, docker_api
) -> None:
    """A snapshot image whose emulation died without stopping (its owner label names a pid
    that is gone) is removed when the next emulation starts; a live owner's is kept."""
    gone = subprocess.Popen(["true"])  # a pid that has exited: an owner that is gone
    gone.wait()
    dead, live = f"{kit.owner_host()}:{gone.pid}", kit.owner()
    made = docker_api.create_container(runner_image, command=["true"])["Id"]
    tags = {"dead": dead, "live": live}
    try:
        for tag, owner in tags.items():
            docker_api.commit(
                made, repository=SNAPSHOT_REPOSITORY, tag=f"reap-{tag}",
                changes=[f'LABEL {kit.OWNER}="{owner}"'],
            )  # fmt: skip
    finally:
        docker_api.remove_container(made, force=True)
    try:
        with DaytonaEmulation(image=runner_image):
            left = {t for i in docker_api.images(name=SNAPSHOT_REPOSITORY) for t in i["RepoTags"]}
        assert f"{SNAPSHOT_REPOSITORY}:reap-dead" not in left
        assert f"{SNAPSHOT_REPOSITORY}:reap-live" in left  # this process's: alive, kept
    finally:
        for tag in tags:
            with contextlib.suppress(Exception):
                docker_api.remove_image(f"{SNAPSHOT_REPOSITORY}:reap-{tag}", force=True)


def test_launch_paths_are_accepted_for_daytona(tmp_path) -> None:
    """``launch = "restore"`` and ``"resume"`` (with a pool) configure on a daytona entry, its
    emulation or the real service, as on any other kind."""
    import tomllib

    text = """
[[substrates]]
name = "daytona-restore"
kind = "daytona"
emulate = true
launch = "restore"

[[substrates]]
name = "daytona-resume"
kind = "daytona"
emulate = true
launch = "resume"
pool = { size = 1 }
"""
    conf = config.parse(tomllib.loads(text), base=tmp_path).substrates
    assert conf["daytona-restore"].launch == "restore" and conf["daytona-restore"].pool is None
    assert conf["daytona-resume"].launch == "resume" and conf["daytona-resume"].pool.size == 1
