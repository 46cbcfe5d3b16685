"""The podman substrate on this machine's podman: the whole contract, plus what only the podman
CLI can get wrong (a container killed from outside, podman's own exit code 125, the image copied
from Docker, leftovers of another name)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections.abc import Iterator

import pytest

from contract import SubstrateContract
from polling import DEADLINE_S, deadline_s
from rtax.assets.attrs import Fixture, GitServer
from rtax.core import workloads
from rtax.core.failures import EnvironmentLost, NotSupported
from rtax.core.workloads import RepoSource
from rtax.rollouts.rollout import run_rollout
from rtax.settings.pool import PoolSettings
from rtax.substrates import get_substrate
from rtax.substrates.base import LABEL
from rtax.substrates.podman import PodmanSubstrate
from rtax.substrates.pool import WarmPool
from rtax.substrates.restore import Restorer


@pytest.fixture(scope="module")
def podman(runner_image: str) -> PodmanSubstrate:
    """A prepared podman substrate (the runner image copied into podman's store). No podman is a
    skip with one line, or a failure under CI=true (`make test` installs it)."""
    if shutil.which("podman") is None:
        reason = "no podman here; run `make test` as root (it installs podman and catatonit)"
        if os.environ.get("CI") == "true":
            pytest.fail(f"CI requires podman: {reason}")
        pytest.skip(reason)
    sub = PodmanSubstrate()
    sub.prepare(log=lambda message: None)
    return sub


@pytest.fixture(scope="module")
def podman_repo_source(podman: PodmanSubstrate, attrs_fixture: Fixture) -> Iterator[RepoSource]:
    """The fixture over git:// on the address where podman's containers reach this host."""
    with GitServer(attrs_fixture.root, host=podman.host_address) as server:
        yield RepoSource(
            server.url(attrs_fixture.bare_repo.name),
            attrs_fixture.buggy_commit,
            attrs_fixture.fix_patch,
            attrs_fixture.failing_test,
        )


@pytest.fixture(scope="module", autouse=True)
def no_leaked_podman_containers(request) -> Iterator[None]:
    """After this module, no container of this process's is left in podman's store."""
    yield
    if shutil.which("podman") is None:
        return
    out = subprocess.run(
        ["podman", "ps", "-a", "--format", "{{.ID}} {{.Labels}}", "--filter", f"label={LABEL}=1"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    mine = [line for line in out.splitlines() if f":{os.getpid()}" in line]
    assert mine == []


class TestPodmanContract(SubstrateContract):
    kind, substrate_name = "podman", "podman"  # whom a skip is counted against

    @pytest.fixture
    def substrate(self, podman: PodmanSubstrate) -> PodmanSubstrate:
        return podman

    @pytest.fixture
    def repo_source(self, podman_repo_source: RepoSource) -> RepoSource:
        return podman_repo_source


class TestPodmanResumeContract(SubstrateContract):
    """The resume path on podman: a pool of containers frozen with ``podman pause``, each
    rollout thawing one (docs/measurement.md#launch-paths)."""

    kind, substrate_name = "podman", "podman"

    @pytest.fixture
    def substrate(self, podman: PodmanSubstrate) -> Iterator[WarmPool]:
        pool = WarmPool(
            PodmanSubstrate(), PoolSettings(2, 1), rollout_lifetime_s=3600 + 120, paused=True
        )
        try:
            pool.prepare(lambda _: None)
            yield pool
        finally:
            pool.close()

    @pytest.fixture
    def repo_source(self, podman_repo_source: RepoSource) -> RepoSource:
        return podman_repo_source


def test_a_resumed_podman_container_was_frozen_and_weighed(podman: PodmanSubstrate) -> None:
    """Every container a resume pool holds is paused (podman says so) and was weighed as it
    waited; the claimed one runs again, and its rollout says what it held."""
    pool = WarmPool(PodmanSubstrate(), PoolSettings(1), rollout_lifetime_s=3720, paused=True)
    try:
        pool.prepare(lambda _: None)
        (held,) = [lo for lo in podman.leftovers() if lo.run_id.startswith("pool-")]
        assert held.frozen
        record = run_rollout(pool, workloads.build("T0"))
        assert record.ok and record.run["launch_type"] == "resume", record.run
        assert json.loads(record.run["provenance"])["pool"]["memory_bytes"] > 0
    finally:
        pool.close()


def test_podman_restore_is_refused_with_the_reason(podman: PodmanSubstrate) -> None:
    """rtax does not snapshot podman containers: the restore path says so when it is built,
    as ``not_supported`` (docs/substrates/podman.md#launch-paths says why)."""
    with pytest.raises(NotSupported, match="can't snapshot") as caught:
        Restorer(PodmanSubstrate())
    assert caught.value.error_class == "not_supported"


def test_registry_and_builtin_name_build_podman(podman: PodmanSubstrate) -> None:
    from rtax.compose import Composition

    assert isinstance(get_substrate("podman"), PodmanSubstrate)
    sub = Composition(emulations="off").substrate("podman")
    assert isinstance(sub, PodmanSubstrate) and sub.fidelity == "real"


def test_the_image_is_dockers_and_the_toolchain_is_reported(
    podman: PodmanSubstrate, runner_image: str
) -> None:
    described = podman.describe()
    assert described["image_id"] == runner_image  # the very image Docker runs
    assert described["toolchain"]["python"].startswith("3.11")
    assert described["toolchain"]["executable"].startswith("/opt/toolchain/")
    assert described["runtime"]["name"]
    assert all(limit.startswith(("nofile=", "nproc=")) for limit in described["ulimits"])


def test_a_container_removed_from_outside_is_environment_lost(podman: PodmanSubstrate) -> None:
    env = podman.create("podman-lost")
    try:
        podman.wait_running(env, DEADLINE_S)
        assert podman.run(env, "true", 30).exit_code == 0
        subprocess.run(
            ["podman", "rm", "-f", "-t", "0", env.env_id], check=True, capture_output=True
        )
        with pytest.raises(EnvironmentLost):
            podman.run(env, "true", 30)
    finally:
        podman.destroy(env, 60)  # already gone: nothing to do, still verified


def test_a_command_exiting_125_is_a_result(podman: PodmanSubstrate) -> None:
    """podman itself exits 125 on its own failures; a command's 125 must stay the command's."""
    env = podman.create("podman-125")
    try:
        podman.wait_running(env, DEADLINE_S)
        result = podman.run(env, "echo out; exit 125", 30)
        assert (result.exit_code, result.stdout) == (125, "out\n")
    finally:
        podman.destroy(env, 60)


def test_leftovers_are_per_name(podman: PodmanSubstrate) -> None:
    other = PodmanSubstrate(name="podman-2")
    env = other.create("podman-other-name")
    try:
        assert [lo.run_id for lo in other.leftovers()] == ["podman-other-name"]
        assert "podman-other-name" not in [lo.run_id for lo in podman.leftovers()]
    finally:
        other.destroy(env, 60)


def test_cli_probe_t2_then_nothing_left(
    podman: PodmanSubstrate, tmp_path, attrs_fixture: Fixture
) -> None:
    import sys

    from rtax.store.database import Store

    db = tmp_path / "pod.db"
    done = subprocess.run(
        [sys.executable, "-m", "rtax", "probe", "--substrate", "podman", "--tier", "T2",
         "--steps", "10", "--db", str(db), "--quiet"],
        capture_output=True,
        text=True,
        timeout=deadline_s(600),
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    with Store(db, create=False) as store:
        runs = store.runs.read()
    assert list(runs["status"]) == ["ok"] and list(runs["substrate"]) == ["podman"]
    assert list(runs["fidelity"]) == ["real"]
    assert [lo for lo in podman.leftovers() if lo.run_id in set(runs["run_id"])] == []
