"""The offline attrs fixture: built once, deterministic, served over git://."""

from __future__ import annotations

import subprocess
from pathlib import Path

from rtax.assets import attrs
from rtax.assets.attrs import Fixture, GitServer


def test_build_twice_is_a_no_op(attrs_fixture: Fixture) -> None:
    manifest = attrs_fixture.root / "manifest.json"
    before = manifest.stat().st_mtime_ns
    again = attrs.build(attrs_fixture.root)
    assert again == attrs_fixture
    assert manifest.stat().st_mtime_ns == before


def test_history_is_pristine_then_buggy(attrs_fixture: Fixture) -> None:
    log = subprocess.run(
        ["git", "--git-dir", str(attrs_fixture.bare_repo), "log", "--format=%H %s", "main"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.splitlines()
    assert [line.split()[0] for line in log] == [
        attrs_fixture.buggy_commit,
        attrs_fixture.pristine_commit,
    ]
    assert "as released on PyPI" in log[1]
    assert attrs.BUG.after.strip() in attrs_fixture.fix_patch
    assert attrs_fixture.attrs_version == attrs.ATTRS_VERSION


def test_template_has_checkout_and_tool(attrs_fixture: Fixture) -> None:
    template = attrs_fixture.template
    assert (template / "attrs" / "src" / "attr" / "validators.py").is_file()
    assert (template / "attrs" / "tests" / "test_validators.py").is_file()
    assert (template / "tools" / "astsearch.py").is_file()
    assert not (template / "attrs" / ".git").exists()
    source = (template / "attrs" / attrs.BUG.path).read_text()
    assert attrs.BUG.before in source  # the preloaded checkout is the pristine release


def test_served_over_git_protocol(attrs_fixture: Fixture, tmp_path: Path) -> None:
    with GitServer(attrs_fixture.root) as server:
        url = server.url("attrs.git")
        assert url.startswith("git://127.0.0.1:")
        subprocess.run(["git", "clone", "--quiet", url, str(tmp_path / "c")], check=True)
    head = subprocess.run(
        ["git", "-C", str(tmp_path / "c"), "rev-parse", "HEAD"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    assert head == attrs_fixture.buggy_commit


def test_load_rejects_incomplete_builds(tmp_path: Path) -> None:
    assert attrs.load(tmp_path) is None
    (tmp_path / "manifest.json").write_text("{not json")
    assert attrs.load(tmp_path) is None
