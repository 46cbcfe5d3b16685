"""The docker substrate on a real engine: the contract in both action modes, gVisor, failures
from outside, the session's framing, and the reaper."""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

import docker.errors
import pytest

from contract import SubstrateContract, assert_clean, assert_phases_add_up
from polling import DEADLINE_S, deadline_s
from rtax.core import workloads
from rtax.core.failures import CommandTimeout, ExecError
from rtax.core.workloads import Action, RepoSource, Workload
from rtax.rollouts.rollout import run_rollout
from rtax.store.database import Store
from rtax.substrates import kit, reaper
from rtax.substrates.base import LABEL, CommandResult, Environment
from rtax.substrates.docker.session import MAX_OUTPUT
from rtax.substrates.docker.substrate import DockerSubstrate


@pytest.fixture
def repo_source(docker_repo_source: RepoSource) -> RepoSource:
    return docker_repo_source


class TestDockerExecContract(SubstrateContract):
    @pytest.fixture
    def substrate(self, runner_image: str) -> DockerSubstrate:
        return DockerSubstrate(mode="exec")


class TestDockerSessionContract(SubstrateContract):
    @pytest.fixture
    def substrate(self, runner_image: str) -> DockerSubstrate:
        return DockerSubstrate(mode="session")


@pytest.fixture
def docker_exec(runner_image: str) -> DockerSubstrate:
    return DockerSubstrate(mode="exec")


@pytest.fixture
def docker_session(runner_image: str) -> DockerSubstrate:
    return DockerSubstrate(mode="session")


@pytest.fixture
def env_of(request):
    """Create environments that are destroyed after the test, whatever happens."""
    made: list[tuple[DockerSubstrate, Environment]] = []

    def make(sub: DockerSubstrate, run_id: str) -> Environment:
        env = sub.create(run_id)
        made.append((sub, env))
        sub.wait_running(env, DEADLINE_S)
        return env

    yield make
    for sub, env in made:
        sub.destroy(env, 60)


# -- gVisor ---------------------------------------------------------------------------------------


def _gvisor(mode: str) -> DockerSubstrate:
    from rtax.compose import Composition

    # the name as `rtax probe --substrate docker-gvisor --mode MODE` builds it
    sub = Composition(emulations="off").substrate("docker-gvisor", mode=mode)
    assert isinstance(sub, DockerSubstrate) and sub.runtime == "runsc" and sub.mode == mode
    return sub


class TestDockerGvisorExecContract(SubstrateContract):
    """gVisor passes the whole contract like runc does (the same image, the same workloads)."""

    kind, substrate_name = "docker", "docker-gvisor"  # whom a skip is counted against

    @pytest.fixture
    def substrate(self, runner_image: str, gvisor: None) -> DockerSubstrate:
        return _gvisor("exec")


class TestDockerGvisorSessionContract(SubstrateContract):
    kind, substrate_name = "docker", "docker-gvisor"

    @pytest.fixture
    def substrate(self, runner_image: str, gvisor: None) -> DockerSubstrate:
        return _gvisor("session")


@pytest.fixture
def docker_gvisor(runner_image: str, gvisor: None) -> DockerSubstrate:
    return _gvisor("exec")


def test_gvisor_really_runs_under_runsc(docker_gvisor: DockerSubstrate, env_of) -> None:
    env = env_of(docker_gvisor, "gvisor-check")
    assert docker_gvisor.api.inspect_container(env.env_id)["HostConfig"]["Runtime"] == "runsc"
    # gVisor's own kernel says so; runc would show the host's kernel log (or deny it).
    assert "gVisor" in docker_gvisor.run(env, "dmesg", 30).stdout


@pytest.mark.parametrize("tier", ["T0", "T2"])
def test_gvisor_tiers(
    docker_gvisor: DockerSubstrate, docker_repo_source: RepoSource, tier: str
) -> None:
    record = run_rollout(docker_gvisor, workloads.build(tier, source=docker_repo_source))
    assert record.ok, record.run
    assert record.run["substrate"] == "docker-gvisor"
    assert_phases_add_up(record)
    assert_clean(docker_gvisor, record)
    assert '"runtime": "runsc"' in record.run["provenance"]


# -- phases, milestones, provenance ---------------------------------------------------------------


# `runsc flags` output (stderr) of Debian 12's runsc, abridged: the defaults come from here.
_RUNSC_FLAGS = """\
  -network value
    \tspecifies which network to use: sandbox (default), host, none. Using network inside
  -num-network-channels int
    \tnumber of underlying channels(FDs) to use for network link endpoints. (default 1)
  -platform string
    \tspecifies which platform to use: ptrace (default), kvm. (default "ptrace")
  -profile
"""
_INFO = {
    "DefaultRuntime": "runc",
    "Runtimes": {
        "runc": {"path": "runc"},
        "runsc": {"path": "/opt/x/runsc", "runtimeArgs": ["--network=host", "--platform=systrap"]},
        "gv-old": {"path": "/usr/bin/runsc", "runtimeArgs": ["--debug"]},
        "gv-spaced": {"path": "/usr/bin/runsc", "runtimeArgs": ["-platform", "kvm"]},
    },
}


def _fake_runsc(argv: list[str]) -> str | None:
    return {"--version": "runsc version 0.0~20221219.0\nspec: 1.0.2-dev\n", "flags": _RUNSC_FLAGS}[
        argv[1]
    ]


def test_runtime_provenance_of_runsc_from_flags_else_its_defaults() -> None:
    from rtax.substrates.docker.daemon import runtime_provenance

    assert runtime_provenance(_INFO, "runsc", _fake_runsc) == {
        "name": "runsc",
        "path": "/opt/x/runsc",
        "args": ["--network=host", "--platform=systrap"],
        "version": "0.0~20221219.0",
        "platform": "systrap",
        "network": "host",
    }
    old = runtime_provenance(_INFO, "gv-old", _fake_runsc)  # no flags: the binary's defaults
    assert (old["platform"], old["network"], old["args"]) == ("ptrace", "sandbox", ["--debug"])
    assert runtime_provenance(_INFO, "gv-spaced", _fake_runsc)["platform"] == "kvm"
    remote = runtime_provenance(_INFO, "gv-old", None)  # a remote engine: not guessed
    assert (remote["version"], remote["platform"], remote["network"]) == (None, None, None)


def test_runtime_provenance_of_runc_and_unknown_runtimes() -> None:
    from rtax.substrates.docker.daemon import runtime_provenance

    def never(argv: list[str]) -> str | None:
        raise AssertionError(f"runc is not asked anything: {argv}")

    assert runtime_provenance(_INFO, None, never) == {"name": "runc", "path": "runc", "args": []}
    assert runtime_provenance(_INFO, "nope", never) == {"name": "nope", "path": None, "args": []}


def test_gvisor_provenance_is_what_the_engine_runs(docker_gvisor: DockerSubstrate) -> None:
    """Checked against the docker CLI and the binary itself, and asked of the engine once."""
    calls = []
    info = docker_gvisor.api.info
    docker_gvisor.api.info = lambda: calls.append(1) or info()  # type: ignore[method-assign]
    first = docker_gvisor.describe()["runtime_config"]
    assert docker_gvisor.describe()["runtime_config"] == first and len(calls) == 1
    cli = subprocess.run(
        ["docker", "info", "--format", "{{json .Runtimes.runsc}}"],
        capture_output=True,
        text=True,
        check=True,
    )
    registered = json.loads(cli.stdout)
    assert (first["path"], first["args"]) == (registered["path"], registered["runtimeArgs"])
    version = subprocess.run(
        [registered["path"], "--version"], capture_output=True, text=True, check=True
    ).stdout.split()[2]
    assert first["version"] == version
    for flag in ("platform", "network"):
        assert f"--{flag}={first[flag]}" in registered["runtimeArgs"]  # ensure-docker sets both


def test_milestones_and_provenance(
    docker_exec: DockerSubstrate, store: Store, runner_image: str
) -> None:
    record = run_rollout(docker_exec, workloads.build("T0"))
    assert record.ok, record.run
    store.save_rollout(record)
    run = store.runs.read().iloc[0]
    names = [m["name"] for m in json.loads(run["milestones"])]
    assert names == ["created", "running", "first_command", "removed"]
    provenance = json.loads(run["provenance"])
    assert provenance["substrate"]["image_id"] == runner_image
    assert provenance["substrate"]["runtime"] == "runc"
    assert provenance["substrate"]["runtime_config"]["name"] == "runc"
    assert run["mode"] == "exec" and run["fidelity"] == "real"


def test_session_mode_is_labelled(docker_session: DockerSubstrate) -> None:
    record = run_rollout(docker_session, workloads.build("T0"))
    assert record.ok and record.run["mode"] == "session"
    assert "session_opened" in record.run["milestones"]


# -- the session's framing ------------------------------------------------------------------------


def test_session_framing(docker_session: DockerSubstrate, env_of) -> None:
    env = env_of(docker_session, "session-framing")
    run = docker_session.run
    assert run(env, "printf 'no newline'", 30).stdout == "no newline"
    assert run(env, "printf 'a\\n\\n'", 30).stdout == "a\n\n"
    r = run(env, "echo out; echo err >&2; exit 5", 30)
    assert (r.exit_code, r.stdout, r.stderr) == (5, "out\n", "err\n")
    run(env, "cd /tmp && export X=1", 30)
    assert run(env, "pwd; echo ${X:-unset}", 30).stdout == "/work\nunset\n"  # nothing leaks
    big = run(env, "head -c 3000000 /dev/zero | tr '\\0' x", 60)
    assert big.stdout == "x" * 3_000_000
    tricky = run(env, "echo '__rtax_ rc 9'; echo \"$(printf '%s' \"it's\")\"", 30)
    assert tricky.stdout == "__rtax_ rc 9\nit's\n" and tricky.exit_code == 0


def test_session_survives_a_timeout(docker_session: DockerSubstrate, env_of) -> None:
    env = env_of(docker_session, "session-timeout")
    docker_session.run(env, "true", 30)
    session = env.handle["session"]
    with pytest.raises(CommandTimeout, match="session kept"):
        docker_session.run(env, "sleep 60 & sleep 60; wait", 0.5)
    after = docker_session.run(env, "echo still here; pgrep -c -f 'slee[p] 60' || true", 30)
    assert after.stdout == "still here\n0\n"  # the hung tree is gone, the shell is the same
    assert env.handle["session"] is session


def test_session_background_output_never_leaks_into_the_next_action(
    docker_session: DockerSubstrate, env_of
) -> None:
    env = env_of(docker_session, "session-background")
    run = docker_session.run
    first = run(env, "(sleep 0.3; echo late-out; echo late-err >&2) & echo hi", 30)
    assert (first.stdout, first.stderr) == ("hi\nlate-out\n", "late-err\n")  # waited for
    second = run(env, "echo second", 30)
    assert (second.stdout, second.stderr) == ("second\n", "")


def test_session_timeout_kills_double_forked_processes(
    docker_session: DockerSubstrate, env_of
) -> None:
    env = env_of(docker_session, "session-double-fork")
    with pytest.raises(CommandTimeout, match="session kept"):
        docker_session.run(env, "(sleep 101 &); sleep 101", 1.0)
    left = docker_session.run(env, "pgrep -c -f 'slee[p] 101' || true", 30)
    assert left.stdout == "0\n"


def test_session_shell_killed_is_not_a_lost_container(
    docker_session: DockerSubstrate, env_of
) -> None:
    env = env_of(docker_session, "session-shell-killed")
    docker_session.run(env, "true", 30)
    with pytest.raises(ExecError, match="container still runs"):
        docker_session.run(env, "kill -9 $$", 30)  # $$ is the session's own shell
    assert docker_session.run(env, "echo back", 30).stdout == "back\n"  # a new session


@pytest.mark.parametrize("last", [10, 300_000])
def test_session_stream_keeps_head_and_tail_whatever_the_frame_sizes(last: int) -> None:
    """The cap holds when the marker arrives in a payload bigger than a spill batch (the
    engine's frames are as big as the shell's writes)."""
    import re

    from rtax.substrates.docker.session import _Stream

    stream = _Stream(re.compile(rb"\nEND\n"), 1000)
    data = bytes(i % 251 for i in range(200_000 + last))
    for i in range(0, 200_000, 1000):
        stream.feed(data[i : i + 1000])
    stream.feed(data[200_000:] + b"\nEND\n")
    text, size = stream.result()
    dropped = len(data) - 1000
    assert size == len(data)
    assert text == (
        data[:500].decode("utf-8", "replace")
        + f"\n[... {dropped} bytes not kept ...]\n"
        + data[-500:].decode("utf-8", "replace")
    )


def test_session_big_output_is_counted_exactly_and_capped(
    docker_session: DockerSubstrate, env_of
) -> None:
    env = env_of(docker_session, "session-big")
    size = MAX_OUTPUT * 2 + 123
    result = docker_session.run(env, f"head -c {size} /dev/zero | tr '\\0' x; echo -n é", 60)
    assert result.stdout_bytes == size + 2  # é is two bytes
    assert len(result.stdout) < MAX_OUTPUT + 70_000  # head and tail kept (64 KiB batches)
    assert result.stdout.startswith("x" * 1000) and result.stdout.endswith("xé")
    assert "bytes not kept" in result.stdout


def test_exec_exit_124_is_not_a_timeout(docker_exec: DockerSubstrate, env_of) -> None:
    env = env_of(docker_exec, "exec-124")
    assert docker_exec.run(env, "exit 124", 30).exit_code == 124


def test_leftovers_are_per_substrate_name(docker_exec: DockerSubstrate, env_of) -> None:
    other = DockerSubstrate(name="docker-other")
    env = env_of(other, "leftover-other")
    assert [lo.env_id for lo in other.leftovers()] == [env.env_id]
    assert env.env_id not in [lo.env_id for lo in docker_exec.leftovers()]


def test_exec_timeout_kills_the_command(docker_exec: DockerSubstrate, env_of) -> None:
    env = env_of(docker_exec, "exec-timeout")
    with pytest.raises(CommandTimeout):
        docker_exec.run(env, "sleep 60 & sleep 60; wait", 0.5)
    assert docker_exec.run(env, "pgrep -c -f 'slee[p] 60' || true", 30).stdout == "0\n"


# -- failures from outside ------------------------------------------------------------------------


class _KillContainerBefore:
    """Wraps a docker substrate; before the n-th command, kills the container from outside."""

    def __init__(self, inner: DockerSubstrate, n: int) -> None:
        self.inner, self.n, self.calls = inner, n, 0
        self.name, self.kind, self.fidelity = inner.name, inner.kind, inner.fidelity
        self.mode = inner.mode

    def __getattr__(self, attr: str):
        return getattr(self.inner, attr)

    def run(self, env: Environment, command: str, timeout_s: float) -> CommandResult:
        self.calls += 1
        if self.calls == self.n:
            subprocess.run(["docker", "kill", env.env_id], check=True, capture_output=True)
        return self.inner.run(env, command, timeout_s)


@pytest.mark.parametrize("mode", ["exec", "session"])
def test_container_killed_mid_trajectory(
    runner_image: str, docker_repo_source: RepoSource, store: Store, mode: str
) -> None:
    sub = _KillContainerBefore(DockerSubstrate(mode=mode), n=6)
    workload = workloads.build("T2", steps=10, source=docker_repo_source)
    record = run_rollout(sub, workload)
    assert record.run["status"] == "failed"
    assert record.run["error_class"] == "environment_lost", record.run
    assert record.run["cleanup_ok"] == 1
    assert_phases_add_up(record)
    store.save_rollout(record)  # the row is kept, with the actions that did run
    kept = store.runs.read(status="failed")
    assert list(kept["error_class"]) == ["environment_lost"]
    assert 0 < record.run["n_actions_done"] < 10
    assert [c for c in sub.inner.leftovers() if c.run_id == record.run["run_id"]] == []


def test_missing_image_is_create_failed(docker_api) -> None:
    sub = DockerSubstrate(image="rtax-no-such-image:none")
    record = run_rollout(sub, workloads.build("T0"))
    assert record.run["error_class"] == "create_failed"
    assert "not found" in record.run["error_message"]
    assert record.run["cleanup_ok"] is None  # nothing was created, nothing to clean


# -- the reaper -----------------------------------------------------------------------------------


def _dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def _plant(api, image: str, labels: dict[str, str]) -> str:
    if LABEL in labels:
        labels = {f"{LABEL}.substrate": "docker", **labels}
    return api.create_container(image, command=["sleep", "infinity"], labels=labels)["Id"]


def test_reaper_removes_orphans_only(
    docker_exec: DockerSubstrate, runner_image: str, capsys
) -> None:
    api, host = docker_exec.api, kit.owner_host()
    stamp = "2020-01-01T00:00:00+00:00"
    orphan = _plant(
        api,
        runner_image,
        {
            LABEL: "1",
            f"{LABEL}.run_id": "planted-orphan",
            f"{LABEL}.owner": f"{host}:{_dead_pid()}",
            f"{LABEL}.created_at": stamp,
        },
    )
    # a live rollout's: its owner alive and its expiry ahead (a leftover with no expiry label
    # older than a day, like the orphan, would go whoever owns it)
    now = datetime.now(UTC)
    live = _plant(
        api,
        runner_image,
        {
            LABEL: "1",
            f"{LABEL}.run_id": "planted-live",
            f"{LABEL}.owner": f"{host}:{os.getpid()}",
            f"{LABEL}.created_at": (now - timedelta(hours=2)).isoformat(),
            f"{LABEL}.expires_at": (now + timedelta(hours=1)).isoformat(),
        },
    )
    foreign = _plant(api, runner_image, {"someone.else": "1"})
    try:
        dry = reaper.reap([docker_exec], dry_run=True)
        assert [o.leftover.run_id for o in dry] == ["planted-orphan"]
        assert api.inspect_container(orphan)  # dry run removed nothing

        from rtax.cli import main

        assert main(["reap", "--substrate", "docker"]) == 0
        out = capsys.readouterr().out
        assert "planted-orphan" in out and "planted-live" not in out
        ids = {c["Id"] for c in api.containers(all=True)}
        assert orphan not in ids
        assert live in ids and foreign in ids
        # --older-than: the live one is still protected by its live owner
        assert reaper.reap([docker_exec], older_than_s=60) == []
        # no owner and no created_at label (made by hand): Docker's own creation time is used,
        # and with --older-than it goes
        unlabelled = _plant(api, runner_image, {LABEL: "1"})
        assert reaper.reap([docker_exec], older_than_s=3600) == []  # too young
        gone = reaper.reap([docker_exec], older_than_s=0)
        assert [o.leftover.env_id for o in gone] == [unlabelled]
    finally:
        for cid in (orphan, live, foreign):
            with contextlib.suppress(docker.errors.NotFound):
                api.remove_container(cid, force=True)


# -- CLI ------------------------------------------------------------------------------------------


def test_cli_probe_docker_then_nothing_left(runner_image: str, tmp_path: Path) -> None:
    db = tmp_path / "d.db"
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "rtax",
            "probe",
            "--substrate",
            "docker",
            "--tier",
            "T2",
            "--repeat",
            "2",
            "--mode",
            "session",
            "--db",
            str(db),
            "--quiet",
        ],
        capture_output=True,
        text=True,
        timeout=deadline_s(600),
    )
    assert done.returncode == 0, done.stderr
    with Store(db, create=False) as store:
        runs = store.runs.read()
    assert list(runs["status"]) == ["ok", "ok"] and set(runs["mode"]) == {"session"}
    assert (
        runs[["create_s", "orchestration_s", "ready_s", "setup_s", "actions_s", "cleanup_s"]]
        .notna()
        .all()
        .all()
    )
    # this probe's containers, by their run ids (another rtax on the engine is not this one's)
    left = [
        subprocess.run(
            ["docker", "ps", "-aq", "--filter", f"label={kit.RUN_ID}={run_id}"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        for run_id in runs["run_id"]
    ]
    assert left == ["", ""]


def test_hang_in_workload_is_classified(docker_exec: DockerSubstrate) -> None:
    hang = Workload("T0", 0, 0, actions=(Action("exec", "sleep 60", timeout_s=1.0),))
    record = run_rollout(docker_exec, hang)
    assert record.run["error_class"] == "action_timeout"
    assert 1.0 <= record.actions[-1]["latency_s"] < 10
    assert_clean(docker_exec, record)


def test_held_memory_is_usage_less_the_inactive_page_cache() -> None:
    """As ``docker stats`` shows it: cgroup v2 ``inactive_file``, v1 ``total_inactive_file``;
    no usage (a runtime without cgroup statistics): unknown, never 0."""
    from rtax.substrates.docker.substrate import held_memory

    assert held_memory({"usage": 10_000, "stats": {"inactive_file": 4_000}}) == 6_000
    assert held_memory({"usage": 10_000, "stats": {"total_inactive_file": 1_000}}) == 9_000
    assert held_memory({"usage": 10_000}) == 10_000
    assert held_memory({"usage": 10_000, "stats": {"inactive_file": 20_000}}) == 10_000
    assert held_memory({}) is None
    assert held_memory({"usage": None}) is None
