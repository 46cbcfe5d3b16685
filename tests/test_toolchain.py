"""The workload toolchain: one pinned set of programs on every substrate (docs/toolchain.md).
The floor and the runner image must time the same pytest, the same hypothesis, the same
interpreter minor version, and say so in every run's provenance."""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path

import pytest

from rtax.assets import toolchain
from rtax.core.workloads import Action, Workload
from rtax.rollouts.rollout import run_rollout
from rtax.store.database import Store
from rtax.substrates.local import LocalSubstrate

PIN_TEXT = """# python 3.11
pytest==9.2.0 \\
    --hash=sha256:aaaa \\
    --hash=sha256:bbbb
installer==0.7.0 --hash=sha256:cccc
"""


def test_pin_file_parses_python_minor_and_hashed_pins(tmp_path: Path) -> None:
    path = tmp_path / "pins.txt"
    path.write_text(PIN_TEXT)
    pins = toolchain.load(path)
    assert pins.python == "3.11"
    assert [(p.name, p.version, p.hashes) for p in pins.pins] == [
        ("pytest", "9.2.0", ("aaaa", "bbbb")),
        ("installer", "0.7.0", ("cccc",)),
    ]
    assert pins.expected() == {"pytest": "9.2.0"}  # the installer is a tool, not a workload dist


@pytest.mark.parametrize(
    "text, problem",
    [
        ("pytest==9.2.0 --hash=sha256:aa\ninstaller==0.7.0 --hash=sha256:cc\n", "python X.Y"),
        ("# python 3.11\npytest>=9 --hash=sha256:aa\n", "not a pinned"),
        ("# python 3.11\npytest==9.2.0\n", "not a pinned"),
        ("# python 3.11\npytest==9.2.0 --hash=sha256:aa\n", "installer"),
    ],
)
def test_pin_file_refuses_what_would_not_be_reproducible(
    tmp_path: Path, text: str, problem: str
) -> None:
    path = tmp_path / "pins.txt"
    path.write_text(text)
    with pytest.raises(toolchain.ToolchainError, match=problem):
        toolchain.load(path)


def test_shipped_pins_cover_what_the_workloads_import() -> None:
    pins = toolchain.load()
    assert pins.python == "3.11"
    names = set(pins.expected())
    # the attrs tests import pytest and hypothesis; pytest's and hypothesis's own dependencies
    # must be pinned too, since the install resolves nothing
    assert {"pytest", "hypothesis", "pluggy", "iniconfig", "packaging", "sortedcontainers"} <= names


def test_a_wheel_whose_hash_differs_is_not_used(tmp_path: Path) -> None:
    path = tmp_path / "pins.txt"
    path.write_text(PIN_TEXT)
    pins = toolchain.load(path)
    folder = tmp_path / "wheels"
    folder.mkdir()
    (folder / "pytest-9.2.0-py3-none-any.whl").write_bytes(b"not the pinned wheel")
    (folder / "installer-0.7.0-py3-none-any.whl").write_bytes(b"x")
    with pytest.raises(
        toolchain.ToolchainError, match=re.escape("pytest==9.2.0, installer==0.7.0")
    ):
        toolchain.wheels(pins, folder)


def test_digest_depends_on_minor_version_and_distributions_only() -> None:
    base = {"implementation": "cpython", "python": "3.11.2", "distributions": {"pytest": "9.2.0"}}
    same = {**base, "python": "3.11.7", "executable": "/elsewhere/bin/python3"}
    assert toolchain.digest(base) == toolchain.digest(same)
    assert toolchain.digest(base) != toolchain.digest({**base, "python": "3.12.1"})
    plugin = {**base, "distributions": {"pytest": "9.2.0", "pytest-benchmark": "5.1"}}
    assert toolchain.digest(base) != toolchain.digest(plugin)


def test_mismatches_name_every_difference_from_the_pins() -> None:
    pins = toolchain.load()
    good = {"python": "3.11.2", "distributions": pins.expected()}
    assert toolchain.mismatches(good, pins) == []
    bad = {
        "python": "3.12.0",
        "distributions": {**pins.expected(), "pytest": "7.2.1", "pytest-timeout": "2.4.0"},
    }
    problems = toolchain.mismatches(bad, pins)
    assert "python 3.12.0 (pinned 3.11)" in problems
    assert "pytest 7.2.1 (pinned 9.2.0)" in problems
    assert "pytest-timeout 2.4.0 (pinned none)" in problems


def test_local_commands_run_the_pinned_toolchain_not_the_project_venv(
    local: LocalSubstrate,
) -> None:
    """What `python3 -m pytest` is on the floor: the pinned versions, from the toolchain's venv,
    with exactly the pinned distributions (no project plugins)."""
    env = local.create("toolchain-check")
    try:
        result = local.run(env, toolchain_command(), 60)
    finally:
        local.destroy(env, 30)
    assert result.exit_code == 0, result.stderr
    seen = json.loads(result.stdout)
    assert seen["distributions"] == toolchain.load().expected()
    assert seen["python"].startswith("3.11.")
    assert str(toolchain.local_dir()) in seen["executable"]
    assert ".venv" not in seen["executable"]


def toolchain_command() -> str:
    return f'python3 -I -c "{toolchain.FINGERPRINT_SCRIPT}"'


def test_local_commands_see_an_allow_listed_environment(
    local: LocalSubstrate, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Nothing of the scheduler's environment reaches a command: not a credential, not the
    project venv, not PYTHONPATH."""
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "planted-secret-value")
    monkeypatch.setenv("PYTHONPATH", "/planted/path")
    fresh = LocalSubstrate(root=local.root, template=local.template)
    env = fresh.create("env-check")
    try:
        result = fresh.run(env, "env", 30)
    finally:
        fresh.destroy(env, 30)
    names = {line.split("=", 1)[0] for line in result.stdout.splitlines() if "=" in line}
    assert "AWS_SECRET_ACCESS_KEY" not in names
    assert "planted" not in result.stdout
    assert names >= {"PATH", "HOME", "LC_ALL", "PYTHONDONTWRITEBYTECODE"}
    assert not names & {"VIRTUAL_ENV", "PYTHONPATH", "PYTHONHOME"}


def test_every_run_records_its_toolchain(local: LocalSubstrate, store: Store) -> None:
    workload = Workload("T0", 0, 0, actions=(Action("exec", "echo ok", expect_stdout="ok"),))
    record = run_rollout(local, workload)
    assert record.ok, record.run["error_message"]
    store.save_rollout(record)
    provenance = json.loads(record.run["provenance"])
    fp = provenance["substrate"]["toolchain"]
    assert fp["distributions"] == toolchain.load().expected()
    assert store.runs.read()["toolchain"].tolist() == [toolchain.digest(fp)]
    assert store.runs.floor_toolchain() == toolchain.digest(fp)


def test_the_install_script_makes_a_venv_of_exactly_the_wheels(tmp_path: Path) -> None:
    """The script both sides use, run by hand: a venv with the wheels and nothing else (no pip,
    no setuptools)."""
    found = toolchain.download(lambda m: None)
    staging = tmp_path / "wheels"
    staging.mkdir()
    for name, path in found.items():
        if name != toolchain.INSTALLER:
            os.link(path, staging / path.name)
    python = toolchain.find_interpreter(toolchain.load().python)
    dest = tmp_path / "tc"
    subprocess.run(
        [
            "sh",
            str(toolchain.INSTALL_SCRIPT),
            python,
            str(dest),
            str(staging),
            str(found[toolchain.INSTALLER]),
        ],
        check=True,
        capture_output=True,
    )
    fp = toolchain.fingerprint(str(dest / "bin" / "python3"))
    assert toolchain.mismatches(fp) == []
    assert "pip" not in fp["distributions"]
