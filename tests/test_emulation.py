"""The emulation registry and the state file `rtax emulate` publishes for the CLI and the
scheduler: only a live publisher counts, and fidelity is forced to `emulated`."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from rtax import config, emulation
from rtax.config import ConfigError


def test_every_emulated_kind_is_a_substrate_kind() -> None:
    from rtax.substrates import REGISTRY

    assert set(emulation.kinds()) <= set(REGISTRY)
    with pytest.raises(ValueError, match="no emulation for 'docker'"):
        emulation.emulation_class("docker")


def test_published_state_is_read_back_while_its_process_lives(tmp_path: Path) -> None:
    path = tmp_path / "emulations.json"
    params = {"kubernetes": {"host": "http://127.0.0.1:1", "fidelity": "emulated"}}
    emulation.publish(params, path=path)
    assert emulation.running(path=path) == params
    emulation.unpublish(path=path)
    assert not path.exists() and emulation.running(path=path) == {}


def test_state_of_a_dead_publisher_is_ignored(tmp_path: Path) -> None:
    dead = subprocess.run(
        [sys.executable, "-c", "import os; print(os.getpid())"],
        capture_output=True,
        text=True,
        check=True,
    )
    path = tmp_path / "emulations.json"
    path.write_text(json.dumps({"pid": int(dead.stdout), "emulations": {"ec2": {}}}))
    assert emulation.running(path=path) == {}
    path.write_text("{not json")
    assert emulation.running(path=path) == {}


def test_unpublish_leaves_another_process_state_alone(tmp_path: Path) -> None:
    path = tmp_path / "emulations.json"
    path.write_text(json.dumps({"pid": os.getppid(), "emulations": {}}))
    emulation.unpublish(path=path)
    assert path.exists()


def test_overlay_always_labels_emulated() -> None:
    merged = emulation.overlay(
        {"host": "http://127.0.0.1:9", "fidelity": "emulated", "namespace": "default"},
        {"namespace": "probe", "fidelity": "real"},
    )
    assert merged == {"host": "http://127.0.0.1:9", "namespace": "probe", "fidelity": "emulated"}


def _conf(tmp_path: Path, entry: str):
    file = tmp_path / "rtax.toml"
    file.write_text(f"[[substrates]]\n{entry}\n")
    return config.load(file)


def test_config_emulate_flag(tmp_path: Path) -> None:
    conf = _conf(tmp_path, 'name = "k"\nkind = "kubernetes"\nemulate = true')
    assert conf.substrates["k"].emulate is True
    with pytest.raises(ConfigError, match="a docker substrate has no emulation"):
        _conf(tmp_path, 'name = "d"\nkind = "docker"\nemulate = true')
    with pytest.raises(ConfigError, match="emulate: must be true or false"):
        _conf(tmp_path, 'name = "k"\nkind = "kubernetes"\nemulate = "yes"')


def test_the_demo_configuration_is_valid_and_only_emulates_clouds() -> None:
    demo = config.load(Path(__file__).resolve().parent.parent / "examples" / "emulated.toml")
    clouds = {n: c for n, c in demo.substrates.items() if c.kind in emulation.kinds()}
    assert set(clouds) == {"kubernetes", "ec2", "daytona"}
    assert all(c.emulate for c in clouds.values())
