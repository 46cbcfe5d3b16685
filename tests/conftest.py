"""Shared fixtures: a fresh database per test, the real attrs fixture, a real local substrate."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

import engine
from rtax.assets import attrs
from rtax.assets.attrs import Fixture, GitServer
from rtax.core.workloads import RepoSource
from rtax.store.database import Store
from rtax.substrates import kit
from rtax.substrates.local import LocalSubstrate
from rtax.substrates.reaper import pid_alive


@pytest.fixture
def db_path(tmp_path: Path) -> Path:
    return tmp_path / "rtax.db"


@pytest.fixture
def store(db_path: Path) -> Iterator[Store]:
    with Store(db_path) as s:
        yield s


@pytest.fixture(scope="session")
def attrs_fixture() -> Fixture:
    """The real offline attrs fixture, built once (a no-op when data/fixtures is current)."""
    return attrs.build()


def _source(fixture: Fixture, server: GitServer) -> RepoSource:
    return RepoSource(
        server.url(fixture.bare_repo.name),
        fixture.buggy_commit,
        fixture.fix_patch,
        fixture.failing_test,
    )


@pytest.fixture(scope="session")
def git_server(attrs_fixture: Fixture) -> Iterator[GitServer]:
    with GitServer(attrs_fixture.root) as server:
        yield server


@pytest.fixture(scope="session")
def repo_source(attrs_fixture: Fixture, git_server: GitServer) -> RepoSource:
    """T2's source over git:// from a real git daemon on loopback."""
    return _source(attrs_fixture, git_server)


@pytest.fixture
def local(tmp_path: Path, attrs_fixture: Fixture) -> LocalSubstrate:
    """A local substrate whose environments live in this test's own folder."""
    return LocalSubstrate(root=tmp_path / "envs", template=attrs_fixture.template)


# -- Docker --------------------------------------------------------------------------------------
# A real engine is required under CI=true (a missing one fails loudly); elsewhere the Docker tests
# skip with one line saying why and how to get one. `make test` installs and starts it itself.

_HOW = "run `make test` as root (it installs docker.io and starts dockerd) or start dockerd"


def _docker_api_or_reason():
    try:
        import docker

        client = docker.from_env(timeout=600)
        client.ping()
        return client.api, None
    except Exception as exc:
        return None, f"no Docker engine answers ({type(exc).__name__}); {_HOW}"


@pytest.fixture(scope="session")
def docker_api():
    api, reason = _docker_api_or_reason()
    if api is None:
        if os.environ.get("CI") == "true":
            pytest.fail(f"CI requires Docker: {reason}")
        pytest.skip(reason)
    return api


@pytest.fixture(scope="session")
def runner_image(docker_api, attrs_fixture: Fixture) -> str:
    """The runner image, built if missing (mmdebstrap + docker import + docker build)."""
    from rtax.assets.image import ensure_runner

    return ensure_runner(log=lambda message: None)


@pytest.fixture(scope="session")
def gvisor(docker_api) -> None:
    """gVisor's runsc must be a configured runtime of the engine."""
    if "runsc" not in (docker_api.info().get("Runtimes") or {}):
        reason = "the Docker engine has no runsc runtime; " + _HOW
        if os.environ.get("CI") == "true":
            pytest.fail(f"CI requires gVisor: {reason}")
        pytest.skip(reason)


@pytest.fixture(scope="session")
def docker_git_server(docker_api, attrs_fixture: Fixture) -> Iterator[GitServer]:
    """The fixture over git:// on the bridge gateway, where containers reach this host."""
    from rtax.substrates.docker.substrate import DockerSubstrate

    host = DockerSubstrate().host_address
    with GitServer(attrs_fixture.root, host=host) as server:
        yield server


@pytest.fixture(scope="session")
def docker_repo_source(attrs_fixture: Fixture, docker_git_server: GitServer) -> RepoSource:
    return _source(attrs_fixture, docker_git_server)


#: rtax containers and images an earlier run left on the engine (reported, never counted here).
_earlier: set[str] = set()


@pytest.fixture(scope="session", autouse=True)
def no_leaked_containers() -> Iterator[None]:
    """After the whole suite, no container labelled rtax that this run made may be left.

    "This run" = not there when the suite started, and owned by this process or by a process
    that is gone (the CLI subprocesses the tests start); a concurrent probe's containers (a
    live owner that isn't us) are neither counted nor touched."""
    api, _ = _docker_api_or_reason()
    before = (
        {c["Id"] for c in api.containers(all=True, filters={"label": "rtax"})} if api else set()
    )
    earlier = engine.remember() if api else set()
    yield
    if api is None:
        return
    _earlier.update(earlier)  # not this run's to judge or remove (tests/engine.py): said once
    host = kit.owner_host()
    leaked = []
    for c in api.containers(all=True, filters={"label": "rtax"}):
        owner_host, _, pid = (c["Labels"].get("rtax.owner") or "").rpartition(":")
        ours = (
            owner_host == host
            and pid.isdigit()
            and (int(pid) == os.getpid() or not pid_alive(int(pid)))
        )
        if c["Id"] not in before and ours:
            leaked.append(c)
    for c in leaked:  # remove them so one failure doesn't cascade into the next run
        api.remove_container(c["Id"], force=True)
    assert not leaked, (
        f"containers labelled rtax left after the suite: {[c['Names'] for c in leaked]}"
    )


# -- every substrate kind must really pass its contract under CI ---------------------------------
# `RTAX_REQUIRE_CONTRACT=local,docker,docker-gvisor,...` (set by .ci/run; kinds or substrate
# names) turns "a kind's contract suite was skipped, deselected or failed" into a failed session
# with one line per kind: the acceptance is that every kind is exercised, and a skip must never
# pass for that silently.

_contract_outcomes: dict[str, list[str]] = {}


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):  # type: ignore[no-untyped-def]
    outcome = yield
    report = outcome.get_result()
    cls = getattr(item, "cls", None)
    from contract import SubstrateContract

    if cls is None or not issubclass(cls, SubstrateContract):
        return
    substrate = getattr(item, "funcargs", {}).get("substrate")
    kind = getattr(substrate, "kind", None) or getattr(cls, "kind", None)
    # Also under the substrate's name, so that a name sharing a kind (docker-gvisor) can be
    # required on its own.
    name = getattr(substrate, "name", None) or getattr(cls, "substrate_name", None)
    if report.when == "call" or report.outcome != "passed":
        for key in {kind, name} - {None}:
            _contract_outcomes.setdefault(key, []).append(report.outcome)


_contract_deselected: list[str] = []


def pytest_deselected(items):  # type: ignore[no-untyped-def]
    from contract import SubstrateContract

    for item in items:
        cls = getattr(item, "cls", None)
        if cls is not None and issubclass(cls, SubstrateContract):
            _contract_deselected.append(item.nodeid)


def pytest_sessionfinish(session, exitstatus):  # type: ignore[no-untyped-def]
    from contract import coverage_problems

    reporter = session.config.pluginmanager.get_plugin("terminalreporter")
    if _earlier and reporter is not None:
        reporter.write_line(
            f"note: {len(_earlier)} rtax containers/images were on the engine when the suite "
            "started (an earlier run's, or a live probe's): not counted as this run's leaks and "
            "left in place (`rtax reap` removes them once their owner is gone or they expire)",
            yellow=True,
        )
    required = [k for k in os.environ.get("RTAX_REQUIRE_CONTRACT", "").split(",") if k]
    problems = coverage_problems(required, _contract_outcomes, _contract_deselected)
    if problems:
        if reporter is not None:
            reporter.write_sep("=", "contract coverage (RTAX_REQUIRE_CONTRACT)", red=True)
            for line in problems:
                reporter.write_line(f"RTAX_REQUIRE_CONTRACT: {line}", red=True)
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
