"""Shared fixtures: a fresh database per test, the real attrs fixture, a real local substrate."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from rtax import fixtures
from rtax.fixtures import Fixture, GitServer
from rtax.store import Store
from rtax.substrates.local import LocalSubstrate
from rtax.workloads import RepoSource


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
    return fixtures.build()


@pytest.fixture(scope="session")
def git_server(attrs_fixture: Fixture) -> Iterator[GitServer]:
    with GitServer(attrs_fixture.root) as server:
        yield server


@pytest.fixture(scope="session")
def repo_source(attrs_fixture: Fixture, git_server: GitServer) -> RepoSource:
    """T2's source over git:// from a real git daemon on loopback."""
    return RepoSource(
        url=git_server.url(attrs_fixture.bare_repo.name),
        commit=attrs_fixture.buggy_commit,
        fix_patch=attrs_fixture.fix_patch,
        failing_test=attrs_fixture.failing_test,
    )


@pytest.fixture
def local(tmp_path: Path, attrs_fixture: Fixture) -> LocalSubstrate:
    """A local substrate whose environments live in this test's own folder."""
    return LocalSubstrate(root=tmp_path / "envs", template=attrs_fixture.template)
