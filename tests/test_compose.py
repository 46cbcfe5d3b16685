"""The composition root: a configured, built-in or emulated name becomes the substrate it stands
for, an unknown one is one clear error, and T2's git server lives exactly as long as its
composition."""

from __future__ import annotations

import socket
import subprocess
from pathlib import Path

import pytest

from polling import DEADLINE_S
from rtax import emulation
from rtax.assets.attrs import Fixture
from rtax.compose import ComposeError, Composition
from rtax.core.failures import HarnessError
from rtax.settings import config
from rtax.substrates import UnknownSubstrate
from rtax.substrates.local import LocalSubstrate


def _file(tmp_path: Path, body: str) -> Path:
    file = tmp_path / "rtax.toml"
    file.write_text(body)
    return file


@pytest.fixture
def data_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A data folder of this test's own, where an `rtax emulate` would publish."""
    folder = tmp_path / "data"
    folder.mkdir()
    monkeypatch.setenv("RTAX_DATA_DIR", str(folder))
    return folder


def test_a_configured_name_is_built_with_its_parameters(tmp_path: Path, monkeypatch) -> None:
    roots = tmp_path / "named-envs"
    monkeypatch.setenv("SCRATCH_SHELL", "/bin/bash")
    file = _file(
        tmp_path,
        '[[substrates]]\nname = "scratch"\nkind = "local"\n'
        f'params = {{ root = "{roots}", shell_env = "SCRATCH_SHELL" }}\n',
    )
    # The CLI's form (the file read when the name is asked for) and the scheduler's (loaded).
    for composition in (Composition(config_path=file), Composition(config.load(file))):
        sub = composition.substrate("scratch")
        assert isinstance(sub, LocalSubstrate) and (sub.name, sub.kind) == ("scratch", "local")
        assert sub.root == roots and sub.shell == "/bin/bash"  # `*_env` read from the environment
        assert sub.mode == "exec"  # a kind without modes acts in exec mode


def test_a_builtin_name_needs_no_configuration_entry(tmp_path: Path) -> None:
    # A file that doesn't mention the name isn't even validated (that would import every kind
    # it names): its mistake about another name does not stop a built-in.
    file = _file(tmp_path, '[[substrates]]\nname = "other"\nkind = "warp-drive"\n')
    composition = Composition(config_path=file, emulations="off")
    gvisor = composition.entry("docker-gvisor")
    assert (gvisor.name, gvisor.kind, gvisor.params, gvisor.emulate) == (
        "docker-gvisor",
        "docker",
        {"runtime": "runsc", "snapshot_runtime": "runsc-checkpoint"},
        False,
    )
    local = composition.substrate("local", mode=None)  # overrides of None are dropped
    assert isinstance(local, LocalSubstrate) and local.name == "local"
    with pytest.raises(config.ConfigError, match="unknown kind 'warp-drive'"):
        composition.entry("other")  # named: now it is validated, every mistake a line


def test_an_emulated_name_probes_the_emulation_that_serves_it(
    tmp_path: Path, data_dir: Path
) -> None:
    file = _file(
        tmp_path,
        '[[substrates]]\nname = "k8s-demo"\nkind = "kubernetes"\nemulate = true\n'
        'params = { namespace = "probe" }\n',
    )
    with pytest.raises(ComposeError, match="start it with `rtax emulate kubernetes`"):
        Composition(config_path=file).entry("k8s-demo")  # nothing serves it yet
    served = {"host": "http://127.0.0.1:9", "fidelity": "emulated", "token": "made-up"}
    said: list[str] = []
    with emulation.Publisher() as publisher:  # as a live `rtax emulate kubernetes` does
        publisher.publish({"kubernetes": served})
        composition = Composition(config_path=file, log=said.append)
        demo = composition.entry("k8s-demo")
        assert demo.params == {**served, "namespace": "probe"}  # its own settings kept
        builtin = composition.entry("kubernetes")  # a built-in cloud name follows it too
        assert builtin.params == served and not builtin.emulate
        assert said[-1] == (
            "kubernetes: probing the kubernetes emulation of `rtax emulate` (fidelity emulated)"
        )
        # `rtax reap` visits the real services: the emulation is not theirs
        real = Composition(config_path=file, emulations="off")
        assert real.entry("kubernetes").params == {}
        with pytest.raises(ComposeError, match="rtax emulate kubernetes"):
            real.entry("k8s-demo")


def test_owned_emulations_serve_only_the_entries_that_ask_and_stop_with_the_composition(
    tmp_path: Path, runner_image: str
) -> None:
    file = _file(
        tmp_path,
        '[[substrates]]\nname = "k8s-demo"\nkind = "kubernetes"\nemulate = true\n'
        '[[substrates]]\nname = "k8s-real"\nkind = "kubernetes"\n'
        'params = { host = "https://real.example:6443" }\n',
    )
    composition = Composition(config.load(file), emulations="owned")
    try:
        assert composition.start_emulations(log=lambda _: None) == {}
        (emu,) = composition.started
        assert composition.entry("k8s-demo").params["host"] == emu.url
        assert composition.entry("k8s-demo").params["fidelity"] == "emulated"
        assert composition.entry("k8s-real").params == {"host": "https://real.example:6443"}
        port = int(emu.url.rsplit(":", 1)[1])
    finally:
        composition.close()
    assert composition.started == []
    with pytest.raises(OSError):
        socket.create_connection(("127.0.0.1", port), timeout=2).close()


def test_an_unknown_or_unbuildable_name_is_one_clear_error(tmp_path: Path) -> None:
    composition = Composition(config_path=_file(tmp_path, ""))
    with pytest.raises(UnknownSubstrate) as unknown:
        composition.substrate("warp-drive")
    message = str(unknown.value)
    assert "'warp-drive'" in message and "local" in message and "define it in rtax.toml" in message
    assert "\n" not in message
    with pytest.raises(ComposeError, match="substrate local does not take bogus"):
        composition.substrate("local", bogus=1)
    with pytest.raises(ComposeError, match="cannot read it"):
        Composition(config_path=tmp_path / "absent.toml").entry("local")


def _answers(url: str) -> bool:
    done = subprocess.run(["git", "ls-remote", url], capture_output=True, timeout=DEADLINE_S)
    return done.returncode == 0


def test_the_git_server_serves_t2_for_the_compositions_lifetime(
    tmp_path: Path, attrs_fixture: Fixture
) -> None:
    local = LocalSubstrate(root=tmp_path / "envs", template=attrs_fixture.template)
    with Composition(fixture=attrs_fixture, emulations="off") as composition:
        assert composition.servers == {}  # nothing served before T2 asks
        source = composition.source(local)
        assert source.url.startswith("git://127.0.0.1:")
        assert (source.commit, source.failing_test) == (
            attrs_fixture.buggy_commit,
            attrs_fixture.failing_test,
        )
        assert _answers(source.url)
        assert composition.source(local).url == source.url  # one server per address
        assert list(composition.servers) == ["127.0.0.1"]
        # by path or from elsewhere: no server of rtax's own
        assert composition.source(local, repo_url="path").url == str(attrs_fixture.bare_repo)
        assert composition.source(local, repo_url="git://elsewhere/x.git", commit="abc").commit == (
            "abc"
        )
    assert composition.servers == {}
    assert not _answers(source.url)  # stopped with its composition


class _Unreachable(LocalSubstrate):
    host_address = "192.0.2.1"  # TEST-NET-1: not an address of this host


def test_a_git_server_that_cannot_start_is_rtaxs_failure(
    tmp_path: Path, attrs_fixture: Fixture
) -> None:
    sub = _Unreachable(root=tmp_path / "envs", template=attrs_fixture.template)
    with Composition(fixture=attrs_fixture, emulations="off") as composition:
        with pytest.raises(HarnessError, match=r"git daemon on 192\.0\.2\.1"):
            composition.source(sub)
        assert composition.servers == {}
