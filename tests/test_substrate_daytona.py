"""The daytona substrate through the real `daytona` SDK against the local Daytona emulation
(API + toolbox + socket.io, every sandbox a real container): the contract in both action modes,
each failure the substrate classifies, leftovers, labels and intervals as the API received them,
readiness through the socket.io event, and the API key kept out of everything stored."""

from __future__ import annotations

import importlib.metadata
import itertools
import json
import os
import shlex
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from contract import SubstrateContract, assert_clean, assert_phases_add_up
from polling import DEADLINE_S, joined, wait_for
from rtax.core import workloads
from rtax.core.failures import CreateFailed, SubstrateError
from rtax.core.options import RolloutOptions
from rtax.core.workloads import RepoSource
from rtax.emulation.daytona import DaytonaEmulation, parse_command
from rtax.rollouts.rollout import run_rollout
from rtax.settings import SubstrateConfig
from rtax.store.database import Store
from rtax.substrates import build_substrate, get_substrate
from rtax.substrates.base import LABEL, CommandResult, Environment, require_host_address
from rtax.substrates.daytona import DaytonaSubstrate


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


def _substrate(emu: DaytonaEmulation, **overrides) -> DaytonaSubstrate:
    params = {**emu.substrate_params(), "rate_limit_base_s": 0.01, **overrides}
    sub = get_substrate("daytona", **params)
    assert isinstance(sub, DaytonaSubstrate)
    return sub


@pytest.fixture(scope="module")
def daytona_exec(emulation: DaytonaEmulation) -> Iterator[DaytonaSubstrate]:
    sub = _substrate(emulation, mode="exec")
    yield sub
    sub.close()


@pytest.fixture(scope="module")
def daytona_session(emulation: DaytonaEmulation) -> Iterator[DaytonaSubstrate]:
    sub = _substrate(emulation, mode="session")
    yield sub
    sub.close()


@pytest.fixture
def repo_source(docker_repo_source: RepoSource) -> RepoSource:
    return docker_repo_source


class TestDaytonaExecContract(SubstrateContract):
    @pytest.fixture
    def substrate(self, daytona_exec: DaytonaSubstrate) -> DaytonaSubstrate:
        return daytona_exec


class TestDaytonaSessionContract(SubstrateContract):
    @pytest.fixture
    def substrate(self, daytona_session: DaytonaSubstrate) -> DaytonaSubstrate:
        return daytona_session


def _kept(store: Store, record) -> dict:
    """Save the record and read its run row back: failures are kept, classified."""
    store.save_rollout(record)
    runs = store.runs.read()
    assert len(runs) == 1
    return runs.iloc[0].to_dict()


# -- what the API received ------------------------------------------------------------------------


def test_sandbox_carries_labels_and_auto_stop(
    daytona_exec: DaytonaSubstrate, emulation: DaytonaEmulation, store: Store
) -> None:
    record = run_rollout(daytona_exec, workloads.build("T0"), run_id="labels-check")
    assert record.ok, record.run
    body = next(b for b in emulation.create_bodies if b["name"] == "rtax-labels-check")
    labels = body["labels"]
    assert labels[LABEL] == "1" and labels[f"{LABEL}.run_id"] == "labels-check"
    assert labels[f"{LABEL}.substrate"] == "daytona"
    assert labels[f"{LABEL}.owner"].endswith(f":{os.getpid()}")
    assert labels[f"{LABEL}.created_at"]
    assert body["autoStopInterval"] > 0  # a leaked sandbox stops itself ...
    assert body["autoDeleteInterval"] == 0  # ... and is deleted once stopped
    assert body["snapshot"] == "rtax-runner"
    run = _kept(store, record)
    names = [m["name"] for m in json.loads(run["milestones"])]
    assert names == ["created", "started", "first_command", "removed"]
    assert run["fidelity"] == "emulated" and run["mode"] == "exec"


def test_sandbox_from_an_image_instead_of_a_snapshot(
    emulation: DaytonaEmulation, runner_image: str
) -> None:
    sub = _substrate(emulation, snapshot=None, image=runner_image)
    try:
        record = run_rollout(sub, workloads.build("T0"), run_id="from-image")
    finally:
        sub.close()
    assert record.ok, record.run
    body = next(b for b in emulation.create_bodies if b["name"] == "rtax-from-image")
    assert "snapshot" not in body or body["snapshot"] is None
    assert body["buildInfo"]["dockerfileContent"] == f"FROM {runner_image}\n"


def test_readiness_arrives_through_the_socketio_event(
    emulation: DaytonaEmulation, daytona_exec: DaytonaSubstrate
) -> None:
    """The SDK subscribes to the sandbox's events and learns of the start from one, not from a
    poll. Judged by the order of what the emulation saw, not by a time bound: a loaded machine
    (CI) took 0.95 s to provision what takes 0.6 s quiet, and a wall-clock bound failed there.
    Subscribed, the SDK's safety poll is 1 s apart (unsubscribed it polls every 0.1 s); with the
    event working, no poll lands between the start and the first command. (A safety poll can
    still land inside the event's few milliseconds of delivery; that would fail this test.)"""
    emulation.faults.delay("start", 0.3)  # the first refresh sees "creating"
    record = run_rollout(daytona_exec, workloads.build("T0"), run_id="event-ready")
    assert record.ok, record.run
    assert record.run["orchestration_s"] >= 0.3, record.run
    assert emulation.socket_connections >= 1
    sandbox_id = emulation.ids_by_name["rtax-event-ready"]
    created = next(e[3] for e in emulation.events if e[:2] == ("sandbox.created", sandbox_id))
    started = next(e[3] for e in emulation.events if e[1:3] == (sandbox_id, "started"))
    first_command = min(
        r[3] for r in emulation.requests_for("execute") if sandbox_id in r[2] and r[3] > started
    )
    gets = [
        r[3] for r in emulation.requests_for("get")
        if r[2].endswith(sandbox_id) and created <= r[3] <= first_command
    ]  # fmt: skip
    assert gets and gets[0] < started  # the SDK's first refresh, which saw it not yet started
    assert all(b - a >= 0.5 for a, b in itertools.pairwise(gets)), gets  # the 1 s safety net
    assert [t for t in gets if t > started] == []  # the event, not a poll, ended the wait


# -- failures, classified and kept ----------------------------------------------------------------


def test_create_refused_is_create_failed(
    emulation: DaytonaEmulation, daytona_exec: DaytonaSubstrate, store: Store
) -> None:
    emulation.faults.fail("create", 403, message="Total CPU quota exceeded (10/10)")
    record = run_rollout(daytona_exec, workloads.build("T0"))
    run = _kept(store, record)
    assert (run["status"], run["error_class"]) == ("failed", "create_failed")
    assert "HTTP 403" in run["error_message"] and "quota" in run["error_message"]
    assert run["cleanup_ok"] is None  # nothing was made, nothing to clean


def test_a_500_after_the_sandbox_was_made_leaves_no_sandbox(
    emulation: DaytonaEmulation, daytona_exec: DaytonaSubstrate
) -> None:
    """Daytona made the sandbox, then answered 500: the create fails and the sandbox is
    deleted by name, so that nothing is left to bill."""
    before = len(emulation.requests_for("create"))
    emulation.faults.fail("create", 500, message="internal error", accepted=True)
    with pytest.raises(CreateFailed, match="500"):
        daytona_exec.create("sandbox-500-accepted")
    assert len(emulation.requests_for("create")) - before == 1
    wait_for(  # deletion is asynchronous
        lambda: not [lo for lo in daytona_exec.leftovers() if lo.run_id == "sandbox-500-accepted"],
        "the sandbox made before the 500 to be deleted",
    )


def test_rate_limited_create_is_retried_then_succeeds(
    emulation: DaytonaEmulation, daytona_exec: DaytonaSubstrate
) -> None:
    before = len(emulation.requests_for("create"))
    emulation.faults.fail("create", 429, message="Too many requests", times=2)
    record = run_rollout(daytona_exec, workloads.build("T0"))
    assert record.ok, record.run
    assert len(emulation.requests_for("create")) - before == 3
    assert_clean(daytona_exec, record)
    # the sample says what rate limiting cost it, and under which policy
    provenance = json.loads(record.run["provenance"])
    waits = provenance["rate_limit_waits"]
    assert [(w["call"], w["attempt"]) for w in waits] == [
        ("create sandbox", 1),
        ("create sandbox", 2),
    ]
    assert provenance["substrate"]["rate_limit"]["base_s"] == 0.01


def test_rate_limited_exec_is_retried_then_succeeds(
    emulation: DaytonaEmulation, daytona_exec: DaytonaSubstrate
) -> None:
    emulation.faults.fail("execute", 429, times=2)
    record = run_rollout(daytona_exec, workloads.build("T0"))
    assert record.ok, record.run
    assert_clean(daytona_exec, record)


def test_persistent_rate_limit_is_rate_limited(emulation: DaytonaEmulation, store: Store) -> None:
    sub = _substrate(emulation, rate_limit_attempts=4)
    try:
        emulation.faults.fail("create", 429, message="slow down", times=4)
        record = run_rollout(sub, workloads.build("T0"))
    finally:
        sub.close()
    run = _kept(store, record)
    assert (run["status"], run["error_class"]) == ("failed", "rate_limited")
    assert "4 attempts" in run["error_message"]


def test_sandbox_entering_error_at_start_is_environment_lost(
    emulation: DaytonaEmulation, daytona_exec: DaytonaSubstrate, store: Store
) -> None:
    emulation.faults.fail("start", message="no runner with capacity in region emulated")
    record = run_rollout(daytona_exec, workloads.build("T0"))
    run = _kept(store, record)
    assert (run["status"], run["error_class"]) == ("failed", "environment_lost")
    assert run["create_s"] > 0 and run["orchestration_s"] > 0 and run["actions_s"] is None
    assert "no runner with capacity" in run["error_message"]
    assert run["cleanup_ok"] == 1  # the errored sandbox was deleted and verified gone
    assert_clean(daytona_exec, record)


class _BreakSandboxBefore:
    """Wraps a daytona substrate; before the n-th command, the sandbox enters state error."""

    def __init__(self, inner: DaytonaSubstrate, emu: DaytonaEmulation, n: int) -> None:
        self.inner, self.emu, self.n, self.calls = inner, emu, n, 0
        self.name, self.kind, self.fidelity, self.mode = (
            inner.name, inner.kind, inner.fidelity, inner.mode,
        )  # fmt: skip

    def __getattr__(self, attr: str):
        return getattr(self.inner, attr)

    def run(self, env: Environment, command: str, timeout_s: float) -> CommandResult:
        self.calls += 1
        if self.calls == self.n:
            self.emu.set_error(env.env_id, "runner lost")
        return self.inner.run(env, command, timeout_s)


@pytest.mark.parametrize("mode", ["exec", "session"])
def test_sandbox_breaking_mid_trajectory_is_environment_lost(
    emulation: DaytonaEmulation,
    daytona_exec: DaytonaSubstrate,
    daytona_session: DaytonaSubstrate,
    repo_source: RepoSource,
    store: Store,
    mode: str,
) -> None:
    inner = daytona_exec if mode == "exec" else daytona_session
    sub = _BreakSandboxBefore(inner, emulation, n=6)
    record = run_rollout(sub, workloads.build("T2", steps=10, source=repo_source))
    assert_phases_add_up(record)
    run = _kept(store, record)
    assert (run["status"], run["error_class"]) == ("failed", "environment_lost"), run
    assert "runner lost" in run["error_message"]
    assert 0 < record.run["n_actions_done"] < 10
    assert_clean(inner, record)


def test_create_not_answered_is_create_timeout_and_leaves_nothing(
    emulation: DaytonaEmulation, store: Store
) -> None:
    sub = _substrate(emulation, create_timeout_s=1.0)
    try:
        emulation.faults.delay("create", 2.5)  # made, but the answer comes late
        record = run_rollout(sub, workloads.build("T0"), run_id="late-create")
        run = _kept(store, record)
        assert (run["status"], run["error_class"]) == ("failed", "create_timeout")
        wait_for(  # deletion is asynchronous
            lambda: not [lo for lo in sub.leftovers() if lo.run_id == "late-create"],
            "the late sandbox to be deleted",
        )
    finally:
        sub.close()


def test_sandbox_not_started_in_time_is_ready_timeout(
    emulation: DaytonaEmulation, daytona_exec: DaytonaSubstrate, store: Store
) -> None:
    emulation.faults.delay("start", 3.0)
    record = run_rollout(
        daytona_exec, workloads.build("T0"), options=RolloutOptions(running_timeout_s=1.0)
    )
    run = _kept(store, record)
    assert (run["status"], run["error_class"]) == ("failed", "ready_timeout")
    assert run["cleanup_ok"] == 1
    assert_clean(daytona_exec, record)


def test_start_wait_from_a_worker_thread(
    emulation: DaytonaEmulation, daytona_exec: DaytonaSubstrate
) -> None:
    """The scheduler runs rollouts in worker threads, where the SDK can't use SIGALRM and
    times out by raising into the thread instead: both outcomes must still be classified."""
    records = {}

    def rollout(tag: str, running_timeout_s: float) -> None:
        options = RolloutOptions(running_timeout_s=running_timeout_s)
        records[tag] = run_rollout(daytona_exec, workloads.build("T0"), options=options)

    emulation.faults.delay("start", 2.0, times=2)  # each of the two sandboxes
    for tag, timeout in (("late", 0.5), ("in-time", 30.0)):
        worker = threading.Thread(target=rollout, args=(tag, timeout))
        worker.start()
        joined(worker, f"the {tag} rollout")
    late, in_time = records["late"].run, records["in-time"].run
    assert (late["status"], late["error_class"]) == ("failed", "ready_timeout"), late
    assert late["orchestration_s"] < 2.0 and late["cleanup_ok"] == 1
    assert in_time["status"] == "ok" and in_time["orchestration_s"] >= 2.0, in_time


# -- leftovers ------------------------------------------------------------------------------------


def test_planted_leftover_is_listed_by_label_and_removed(
    emulation: DaytonaEmulation, daytona_exec: DaytonaSubstrate, docker_api
) -> None:
    env = daytona_exec.create("planted-leftover")  # made and never destroyed
    daytona_exec.wait_running(env, DEADLINE_S)
    backing = {"label": f"{LABEL}.run_id={env.env_id}"}
    assert len(docker_api.containers(all=True, filters=backing)) == 1
    other = _substrate(emulation, name="daytona-other")
    try:
        found = [lo for lo in daytona_exec.leftovers() if lo.run_id == "planted-leftover"]
        assert len(found) == 1
        leftover = found[0]
        assert leftover.env_id == env.env_id and leftover.created_at
        assert leftover.owner and leftover.owner.endswith(f":{os.getpid()}")
        assert env.env_id not in [lo.env_id for lo in other.leftovers()]  # per name
        daytona_exec.destroy(leftover, 120)
        assert [lo for lo in daytona_exec.leftovers() if lo.run_id == "planted-leftover"] == []
        # the container behind it is gone too (its run id label is the sandbox id)
        assert docker_api.containers(all=True, filters=backing) == []
    finally:
        other.close()


# -- secrets, provenance, configuration -----------------------------------------------------------


def test_api_key_never_reaches_the_store_or_describe(
    emulation: DaytonaEmulation, monkeypatch: pytest.MonkeyPatch, db_path: Path, tmp_path: Path
) -> None:
    # As the scheduler builds it from rtax.toml: the file names the variable, never the key.
    key = emulation.api_key
    monkeypatch.setenv("RTAX_TEST_DAYTONA_KEY", key)
    params = {k: v for k, v in emulation.substrate_params().items() if k != "api_key"}
    conf = SubstrateConfig(
        name="daytona",
        kind="daytona",
        params={**params, "api_key_env": "RTAX_TEST_DAYTONA_KEY", "rate_limit_base_s": 0.01},
    )
    sub = build_substrate(conf, {})
    assert isinstance(sub, DaytonaSubstrate)
    try:
        assert key not in json.dumps(sub.describe())
        emulation.faults.fail(
            "create", 403, message=f"bad token {key}"
        )  # even an API that echoes it
        with Store(db_path) as store:
            for record in (
                run_rollout(sub, workloads.build("T0")),
                run_rollout(sub, workloads.build("T0")),
            ):
                store.save_rollout(record)
            assert sorted(store.runs.read()["status"]) == ["failed", "ok"]
            assert "***" in str(store.runs.read(status="failed")["error_message"].iloc[0])
            for table in ("runs", "actions"):
                store.runs.export_csv(table, tmp_path / f"{table}.csv")
                assert key not in (tmp_path / f"{table}.csv").read_text()
        assert key.encode() not in db_path.read_bytes()
    finally:
        sub.close()


def test_configuration_errors_are_clear(emulation: DaytonaEmulation, monkeypatch) -> None:
    with pytest.raises(ValueError, match="auto_stop"):
        DaytonaSubstrate(auto_stop_interval_min=0)
    with pytest.raises(ValueError, match="mode"):
        DaytonaSubstrate(mode="pty")
    monkeypatch.delenv("DAYTONA_API_KEY", raising=False)
    with pytest.raises(SubstrateError, match="DAYTONA_API_KEY"):
        DaytonaSubstrate().client()
    with pytest.raises(SubstrateError, match="host_address"):
        require_host_address(DaytonaSubstrate())
    wrong = _substrate(emulation, api_key="rtax-wrong-key")
    try:
        with pytest.raises(SubstrateError, match="refused the API key"):
            wrong.prepare(lambda message: None)
    finally:
        wrong.close()


def test_describe_is_provenance(daytona_session: DaytonaSubstrate) -> None:
    described = daytona_session.describe()
    assert described["mode"] == "session" and described["fidelity"] == "emulated"
    assert described["client"]["daytona"] == importlib.metadata.version("daytona")
    assert described["endpoint"].startswith("http://127.0.0.1:")


@pytest.mark.parametrize(
    "text",
    ["echo 'it''s' \"x y\"", "a\nb\tc", "", "'", "printf '%s\\n' \"$HOME\" && exit 3"],
)
def test_daemon_splitter_understands_shell_quoting(text: str) -> None:
    """The substrate sends `/bin/sh -c <quoted>`; the daemon's splitter must give it back."""
    argv = parse_command(f"/bin/sh -c {shlex.quote(text)}")
    assert argv == (["/bin/sh", "-c", text] if text else ["/bin/sh", "-c"])
