"""The emulation registry and the state file `rtax emulate` publishes for the CLI and the
scheduler: only a live publisher counts, and fidelity is forced to `emulated`."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from polling import DEADLINE_S, deadline_s, wait_for
from rtax import emulation
from rtax.settings import config
from rtax.settings.config import ConfigError


def test_every_emulated_kind_is_a_substrate_kind() -> None:
    from rtax.substrates import REGISTRY

    assert set(emulation.kinds()) <= set(REGISTRY)
    with pytest.raises(ValueError, match="no emulation for 'docker'"):
        emulation.emulation_class("docker")


def test_published_state_counts_only_while_its_publisher_holds_the_lock(tmp_path: Path) -> None:
    path = tmp_path / "emulations.json"
    params = {"kubernetes": {"host": "http://127.0.0.1:1", "fidelity": "emulated"}}
    with emulation.Publisher(path) as publisher:
        publisher.publish(params)
        assert emulation.running(path=path) == params
        assert (path.stat().st_mode & 0o077) == 0  # this user's only: it holds a (fake) key
        with pytest.raises(emulation.EmulationsBusy, match="already serves") as busy:
            emulation.Publisher(path).acquire()  # a second `rtax emulate` refuses at once
        assert f"pid {os.getpid()}" in str(busy.value)  # and says whom to stop
    assert not path.exists() and emulation.running(path=path) == {}


def test_a_stale_state_file_is_ignored_whatever_pid_it_names(tmp_path: Path) -> None:
    """A crashed `rtax emulate` leaves its file; its pid may now be another live process (here:
    this one). Only the lock, which the kernel dropped with the process, decides."""
    path = tmp_path / "emulations.json"
    path.write_text(json.dumps({"pid": os.getpid(), "emulations": {"ec2": {}}}))
    path.with_suffix(".lock").touch()
    assert emulation.running(path=path) == {}
    path.write_text("{not json")
    assert emulation.running(path=path) == {}
    with emulation.Publisher(path):  # and a new publisher can take over at once
        assert emulation.running(path=path) == {}  # nothing published yet


def test_overlay_gives_endpoint_and_credentials_to_the_emulation() -> None:
    merged = emulation.overlay(
        {"host": "http://127.0.0.1:9", "fidelity": "emulated", "namespace": "default"},
        {
            "namespace": "probe",
            "cpu": "2",
            "fidelity": "real",
            "host": "https://real.example:6443",
            "token_env": "REAL_TOKEN",
            "fidelity_env": "FID",
            "kubeconfig": "~/.kube/config",
        },
    )
    assert merged == {
        "host": "http://127.0.0.1:9",
        "namespace": "default",
        "cpu": "2",
        "fidelity": "emulated",
    }


def _conf(tmp_path: Path, entry: str):
    file = tmp_path / "rtax.toml"
    file.write_text(f"[[substrates]]\n{entry}\n")
    return config.load(file)


def test_config_emulate_flag(tmp_path: Path) -> None:
    conf = _conf(tmp_path, 'name = "k"\nkind = "kubernetes"\nemulate = true')
    assert conf.substrates["k"].emulate is True
    with pytest.raises(ConfigError) as refused:  # a real endpoint under the emulated label
        _conf(
            tmp_path,
            'name = "k"\nkind = "kubernetes"\nemulate = true\n'
            'params = { host = "https://real:6443", token_env = "T", fidelity = "real" }',
        )
    assert [p.split(": ")[1] for p in refused.value.problems] == [
        "substrates.k.params.fidelity",
        "substrates.k.params.host",
        "substrates.k.params.token_env",
    ]
    with pytest.raises(ConfigError, match="a docker substrate has no emulation"):
        _conf(tmp_path, 'name = "d"\nkind = "docker"\nemulate = true')
    with pytest.raises(ConfigError, match="emulate: must be true or false"):
        _conf(tmp_path, 'name = "k"\nkind = "kubernetes"\nemulate = "yes"')


def test_the_demo_configuration_is_valid_and_only_emulates_clouds() -> None:
    demo = config.load(Path(__file__).resolve().parent.parent / "examples" / "emulated.toml")
    clouds = {n: c for n, c in demo.substrates.items() if c.kind in emulation.kinds()}
    assert set(clouds) == {"kubernetes", "ec2", "daytona"}
    assert all(c.emulate for c in clouds.values())


@pytest.mark.parametrize("kind", ["kubernetes", "ec2", "daytona"])
def test_rtax_emulate_then_probe_t2_stores_three_ok_emulated_runs(
    kind: str, tmp_path: Path, runner_image: str, attrs_fixture, docker_api
) -> None:
    """The acceptance path as a user types it: `rtax emulate KIND` in one process,
    `rtax probe --substrate KIND --tier T2 --repeat 3` in another, three successful runs labelled
    emulated (the failing test fails, then passes after the fix); Ctrl-C removes everything."""
    import signal

    from rtax.store.database import Store

    env = {
        **os.environ,
        "RTAX_DATA_DIR": str(tmp_path),
        "RTAX_FIXTURES_DIR": str(attrs_fixture.root),
    }
    emulate = subprocess.Popen(
        [sys.executable, "-m", "rtax", "emulate", kind],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        state = tmp_path / "emulations.json"
        wait_for(lambda: state.exists() or emulate.poll() is not None, "the state file")
        assert emulate.poll() is None, "rtax emulate exited before publishing"
        db = tmp_path / "probe.db"
        args = f"probe --substrate {kind} --tier T2 --repeat 3 --db {db}".split()
        probe = subprocess.run(
            [sys.executable, "-m", "rtax", *args],
            env=env,
            capture_output=True,
            text=True,
            timeout=deadline_s(600),
        )
        assert probe.returncode == 0, probe.stderr
        assert f"probing the {kind} emulation" in probe.stderr
        with Store(db, create=False) as store:
            runs = store.runs.read()
            tests = store.runs.actions(phase="action")
        tests = tests[tests["category"] == "test"]
        assert list(runs["status"]) == ["ok"] * 3, runs["error_message"].tolist()
        assert set(runs["fidelity"]) == {"emulated"} and set(runs["substrate"]) == {kind}
        assert sorted(tests["exit_code"]) == [0, 0, 0, 1, 1, 1]  # failing, then fixed
    finally:
        emulate.send_signal(signal.SIGINT)
        out, _ = emulate.communicate(timeout=DEADLINE_S)
    assert emulate.returncode == 130, out
    assert not (tmp_path / "emulations.json").exists()
    left = docker_api.containers(all=True, filters={"label": f"rtax.substrate={kind}-emulation"})
    assert [c for c in left if c["Labels"].get("rtax.owner", "").endswith(f":{emulate.pid}")] == []


def test_scheduler_starts_the_emulation_for_emulate_true(
    tmp_path: Path, runner_image: str, attrs_fixture, monkeypatch
) -> None:
    """`emulate = true`: the scheduler starts the emulation itself, probes it (samples
    labelled emulated), and stops it with itself."""
    from rtax.service.scheduler import Scheduler
    from rtax.store.database import Store

    file = tmp_path / "rtax.toml"
    file.write_text(
        'database = "rtax.db"\n'
        '[[substrates]]\nname = "k8s"\nkind = "kubernetes"\nemulate = true\n'
        'params = { namespace = "default" }\n'
        '[[plans]]\nname = "p"\nsubstrates = ["k8s"]\ntier = "T0"\ninterval = "1h"\n'
    )
    conf = config.load(file)
    scheduler = Scheduler(conf, fixture=attrs_fixture)
    scheduler.start()
    try:
        assert [e.kind for e in scheduler.emulations] == ["kubernetes"]

        def runs():
            if not conf.database.exists():
                return None
            with Store(conf.database, create=False) as store:
                frame = store.runs.read()
            return frame.to_dict("records") or None

        rows = wait_for(runs, "a kubernetes run")
    finally:
        scheduler.stop(wait=True)
    assert scheduler.emulations == []
    assert [(r["fidelity"], r["status"]) for r in rows] == [("emulated", "ok")]


def test_an_optional_substrate_whose_emulation_fails_is_skipped(
    tmp_path: Path, attrs_fixture, monkeypatch
) -> None:
    """A failing probe never takes the monitor down: an optional emulated substrate whose
    emulation can't start is skipped with a warning; a required one stops the start-up."""
    from rtax.service.scheduler import Scheduler

    def broken(kinds, log=print):
        raise RuntimeError("no Docker engine")

    monkeypatch.setattr(emulation, "start_all", broken)
    base = (
        'database = "rtax.db"\n[[substrates]]\nname = "local"\nkind = "local"\n'
        '[[substrates]]\nname = "k8s"\nkind = "kubernetes"\nemulate = true\n{optional}\n'
        '[[plans]]\nname = "p"\nsubstrates = ["local", "k8s"]\ntier = "T0"\ninterval = "1h"\n'
    )
    file = tmp_path / "rtax.toml"
    file.write_text(base.format(optional="optional = true"))
    scheduler = Scheduler(config.load(file), fixture=attrs_fixture)
    scheduler.start()
    try:
        assert scheduler.enabled == {"local": True, "k8s": False}
    finally:
        scheduler.stop(wait=True)
    file.write_text(base.format(optional=""))
    with pytest.raises(RuntimeError, match="no Docker engine"):
        Scheduler(config.load(file), fixture=attrs_fixture).start()


def test_emulated_spending_does_not_use_up_a_real_budget(tmp_path: Path) -> None:
    from datetime import UTC, datetime

    from factories import make_record
    from rtax.service.scheduler import Scheduler
    from rtax.store.database import Store

    file = tmp_path / "rtax.toml"
    file.write_text(
        'database = "rtax.db"\n'
        '[[substrates]]\nname = "ec2"\nkind = "ec2"\nmax_rollouts_per_day = 2\n'
        '[[substrates]]\nname = "ec2-demo"\nkind = "ec2"\nemulate = true\n'
        "max_rollouts_per_day = 2\n"
    )
    conf = config.load(file)
    now = datetime.now(UTC).isoformat(timespec="microseconds")
    with Store(conf.database) as store:
        for i in range(3):  # emulated rollouts under both names (a demo, `rtax emulate`)
            for name in ("ec2", "ec2-demo"):
                store.save_rollout(
                    make_record(f"{name}{i}", substrate=name, fidelity="emulated", started_at=now)
                )
        scheduler = Scheduler(conf)
        assert scheduler.dispatcher.over_budget(conf.substrates["ec2"], store) is None
        assert "3 of 2 rollouts" in scheduler.dispatcher.over_budget(
            conf.substrates["ec2-demo"], store
        )
