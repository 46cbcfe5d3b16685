"""The ec2 substrate against the EC2 + SSM emulation (moto's EC2, rtax's SSM on containers):
the contract, each failure the substrate classifies, the launch request itself, leftovers,
credentials, and proof that nothing but the API endpoint is ever contacted."""

from __future__ import annotations

import inspect
import json
import os
import sys
import threading
import tomllib
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any, ClassVar

import boto3
import pytest

from contract import SubstrateContract, assert_clean, assert_phases_add_up
from polling import DEADLINE_S, wait_for
from rtax.core import workloads
from rtax.core.failures import CleanupFailed, CreateFailed, SubstrateError
from rtax.core.options import RolloutOptions
from rtax.core.record import PHASES
from rtax.core.workloads import Action, RepoSource, Workload
from rtax.emulation.ec2 import STDERR_LIMIT, STDOUT_LIMIT, Ec2Emulation
from rtax.rollouts.rollout import run_rollout
from rtax.settings import config
from rtax.settings import substrates as substrate_table
from rtax.store.database import Store
from rtax.substrates.base import LABEL, CommandResult, Environment, clock, require_host_address
from rtax.substrates.ec2 import EMULATION_KEY, EMULATION_KEY_ID, Ec2Substrate


@pytest.fixture(scope="module")
def emulation(runner_image: str) -> Iterator[Ec2Emulation]:
    with Ec2Emulation(image=runner_image) as emu:
        yield emu


@pytest.fixture(autouse=True)
def _no_faults(request: pytest.FixtureRequest) -> Iterator[None]:
    """Faults are injected per test; none outlives it."""
    if "emulation" not in request.fixturenames:
        yield
        return
    emu = request.getfixturevalue("emulation")
    emu.faults.clear()
    emu.requests.clear()
    yield
    emu.faults.clear()
    emu.requests.clear()


@pytest.fixture
def repo_source(docker_repo_source: RepoSource) -> RepoSource:
    return docker_repo_source


class TestEc2Contract(SubstrateContract):
    @pytest.fixture
    def substrate(self, emulation: Ec2Emulation) -> Ec2Substrate:
        return Ec2Substrate(**emulation.substrate_params())


@pytest.fixture
def fast(emulation: Ec2Emulation) -> Ec2Substrate:
    """Short backoffs, so that failure tests stay fast. (The agent wait keeps its default:
    the first ready attempt waits inside `run` until the agent is online.)"""
    return Ec2Substrate(
        name="ec2-fast",
        rate_limit_base_s=0.01,
        rate_limit_attempts=4,
        state_poll_interval_s=0.05,
        **emulation.substrate_params(),
    )


def _client(emulation: Ec2Emulation, service: str) -> Any:
    """A client of the emulation for the test's own checks (fake keys, no retries)."""
    return boto3.client(
        service,
        region_name=emulation.region,
        endpoint_url=emulation.url,
        aws_access_key_id="test-checker",
        aws_secret_access_key="test-checker",
    )


def _state(emulation: Ec2Emulation, instance_id: str) -> str:
    answer = _client(emulation, "ec2").describe_instances(InstanceIds=[instance_id])
    return answer["Reservations"][0]["Instances"][0]["State"]["Name"]


def _wait_container_gone(emulation: Ec2Emulation, run_id: str) -> None:
    """Backing containers are removed in the background after TerminateInstances."""
    wait_for(
        lambda: not any(lo.run_id == run_id for lo in emulation.backing.leftovers()),
        f"the container of {run_id} to be removed",
    )


def _instance_id(emulation: Ec2Emulation, run_id: str) -> str:
    answer = _client(emulation, "ec2").describe_instances(
        Filters=[{"Name": f"tag:{LABEL}.run_id", "Values": [run_id]}]
    )
    return answer["Reservations"][0]["Instances"][0]["InstanceId"]


def _saved(store: Store, record: Any) -> Any:
    """Save the record and return its stored row; phases must add up whatever failed."""
    if record.run["actions_s"] is not None:
        assert_phases_add_up(record)
    else:  # failed before any action (the contract's helper expects an actions phase)
        phases = [v for k, v in record.run.items() if k.endswith("_s") and k[:-2] in PHASES]
        total = sum(p for p in phases if p is not None) + record.run["overhead_s"]
        assert total == pytest.approx(record.run["wall_s"], abs=1e-9)
    store.save_rollout(record)
    rows = store.runs.read()
    assert len(rows) == 1
    return rows.iloc[0]


# -- the launch request -----------------------------------------------------------------------


def test_instance_is_tagged_and_terminates_on_shutdown(emulation: Ec2Emulation) -> None:
    sub = Ec2Substrate(tags={"team": "rl"}, **emulation.substrate_params())
    env = sub.create("launch-check")
    try:
        sub.wait_running(env, DEADLINE_S)
        ec2 = _client(emulation, "ec2")
        behaviour = ec2.describe_instance_attribute(
            InstanceId=env.env_id, Attribute="instanceInitiatedShutdownBehavior"
        )
        assert behaviour["InstanceInitiatedShutdownBehavior"]["Value"] == "terminate"
        instance = ec2.describe_instances(InstanceIds=[env.env_id])["Reservations"][0]["Instances"][
            0
        ]
        tags = {t["Key"]: t["Value"] for t in instance["Tags"]}
        assert tags[LABEL] == "1" and tags["team"] == "rl"
        assert tags[f"{LABEL}.run_id"] == "launch-check"
        assert tags[f"{LABEL}.substrate"] == "ec2"
        assert tags[f"{LABEL}.owner"].endswith(f":{os.getpid()}")
        assert tags[f"{LABEL}.created_at"].startswith("20")
        assert instance["ImageId"] == emulation.ami
        assert instance["IamInstanceProfile"]["Arn"].endswith("/rtax-ssm")
        assert instance["State"]["Name"] == "running"
    finally:
        sub.destroy(env, 60)
    assert _state(emulation, env.env_id) == "terminated"
    _wait_container_gone(emulation, env.env_id)


def test_milestones_and_provenance(emulation: Ec2Emulation, store: Store) -> None:
    sub = Ec2Substrate(**emulation.substrate_params())
    row = _saved(store, run_rollout(sub, workloads.build("T0")))
    assert row["status"] == "ok" and row["fidelity"] == "emulated"
    names = [m["name"] for m in json.loads(row["milestones"])]
    assert names == ["created", "running", "agent_online", "first_command", "terminated"]
    described = sub.describe()
    assert described["ami"] == emulation.ami and described["endpoint"] == emulation.url
    assert set(described["client"]) == {"boto3", "botocore"}
    assert described["rate_limit"]["attempts"] == 8  # figures under throttling depend on it


# -- failures, each through run_rollout and the store -----------------------------------------


@pytest.mark.parametrize("code", ["InsufficientInstanceCapacity", "UnauthorizedOperation"])
def test_create_refused_is_create_failed(
    emulation: Ec2Emulation, fast: Ec2Substrate, store: Store, code: str
) -> None:
    emulation.faults.fail("RunInstances", code=code, times=None)
    row = _saved(store, run_rollout(fast, workloads.build("T0")))
    assert (row["status"], row["error_class"]) == ("failed", "create_failed")
    assert code in row["error_message"]
    assert row["cleanup_ok"] is None  # nothing was launched
    assert emulation.requests["ec2:RunInstances"] == 1  # a refusal is not retried


def test_a_launch_answered_500_after_it_was_accepted_is_terminated(
    emulation: Ec2Emulation, fast: Ec2Substrate
) -> None:
    """EC2 launched the instance, then the answer was a 500: the substrate finds the launch
    again through its ClientToken and terminates it; nothing is left running."""
    emulation.faults.fail("RunInstances", 500, code="InternalError", accepted=True)
    with pytest.raises(CreateFailed, match="InternalError"):
        fast.create("launch-500-accepted")
    instance_id = _instance_id(emulation, "launch-500-accepted")  # it was launched
    assert _state(emulation, instance_id) in ("shutting-down", "terminated")
    assert [lo for lo in fast.leftovers() if lo.run_id == "launch-500-accepted"] == []
    _wait_container_gone(emulation, "launch-500-accepted")


def test_throttling_is_retried_then_succeeds(
    emulation: Ec2Emulation, fast: Ec2Substrate, store: Store
) -> None:
    emulation.faults.fail("RunInstances", code="RequestLimitExceeded", times=2)
    emulation.faults.fail("SendCommand", code="ThrottlingException", times=2)
    emulation.faults.fail("GetCommandInvocation", code="ThrottlingException", times=1)
    record = run_rollout(fast, workloads.build("T0"))
    row = _saved(store, record)
    assert row["status"] == "ok", row["error_message"]
    assert emulation.requests["ec2:RunInstances"] == 3
    assert emulation.requests["ssm:SendCommand"] == 2 + 2  # ready + action, 2 throttled
    # every wait is in the sample it slowed down, the launch's included
    waits = json.loads(record.run["provenance"])["rate_limit_waits"]
    assert [(w["call"], w["attempt"]) for w in waits] == [
        ("RunInstances", 1),
        ("RunInstances", 2),
        ("SendCommand", 1),
        ("SendCommand", 2),
        ("GetCommandInvocation", 1),
    ]
    assert_clean(fast, record)


@pytest.mark.parametrize(
    ("action", "phase"), [("RunInstances", "create"), ("DescribeInstances", "orchestration")]
)
def test_persistent_ec2_throttling_is_rate_limited(
    emulation: Ec2Emulation, fast: Ec2Substrate, store: Store, action: str, phase: str
) -> None:
    # throttled for every attempt of one call, then answered (so that cleanup can run)
    emulation.faults.fail(action, code="RequestLimitExceeded", times=fast.rate_limit.attempts)
    row = _saved(store, run_rollout(fast, workloads.build("T0")))
    assert (row["status"], row["error_class"]) == ("failed", "rate_limited")
    assert "RequestLimitExceeded" in row["error_message"]
    assert f"after {fast.rate_limit.attempts} attempts" in row["error_message"]
    assert row[f"{phase}_s"] is not None and row["ready_s"] is None
    if action == "DescribeInstances":
        assert row["cleanup_ok"] == 1
        assert [lo for lo in fast.leftovers() if lo.run_id == row["run_id"]] == []
    else:
        assert row["cleanup_ok"] is None
        assert emulation.requests["ec2:RunInstances"] == fast.rate_limit.attempts


class _Before:
    """Wraps a substrate; before its n-th command after the ready phase, calls `hook(env)`."""

    def __init__(self, inner: Ec2Substrate, n: int, hook: Any) -> None:
        self.inner, self.n, self.hook, self.calls = inner, n, hook, 0
        self.name, self.kind, self.fidelity = inner.name, inner.kind, inner.fidelity

    def __getattr__(self, attr: str) -> Any:
        return getattr(self.inner, attr)

    def run(self, env: Environment, command: str, timeout_s: float) -> CommandResult:
        if any(m.name == "first_command" for m in env.milestones):  # ready: one succeeded
            self.calls += 1
            if self.calls == self.n:
                self.hook(env)
        return self.inner.run(env, command, timeout_s)


def test_persistent_ssm_throttling_during_actions_is_rate_limited(
    emulation: Ec2Emulation, fast: Ec2Substrate, store: Store
) -> None:
    def throttled(env: Environment) -> None:
        emulation.faults.fail("SendCommand", code="ThrottlingException", times=None)

    sub = _Before(fast, 1, throttled)
    row = _saved(store, run_rollout(sub, workloads.build("T0")))
    assert (row["status"], row["error_class"]) == ("failed", "rate_limited")
    assert "ThrottlingException" in row["error_message"]
    assert emulation.requests["ssm:SendCommand"] == 1 + fast.rate_limit.attempts
    assert row["cleanup_ok"] == 1


def test_agent_never_online_is_ready_timeout(emulation: Ec2Emulation, store: Store) -> None:
    fast = Ec2Substrate(agent_wait_s=0.2, **emulation.substrate_params())
    emulation.faults.fail("agent")  # the next instance's agent never comes online
    record = run_rollout(fast, workloads.build("T0"), options=RolloutOptions(ready_timeout_s=1.0))
    row = _saved(store, record)
    assert (row["status"], row["error_class"]) == ("failed", "ready_timeout")
    assert "not online" in row["error_message"]
    assert row["time_to_first_command_s"] is None and 1.0 <= row["wall_s"] < 10
    assert emulation.requests["ssm:SendCommand"] == 0  # never sent to an offline agent
    assert_clean(fast, record)
    attempts = [a for a in record.actions if a["phase"] == "ready"]
    assert len(attempts) >= 2 and not any(a["ok"] for a in attempts)  # each one kept
    _wait_container_gone(emulation, _instance_id(emulation, record.run["run_id"]))


def test_instance_terminated_mid_rollout_is_environment_lost(
    emulation: Ec2Emulation, fast: Ec2Substrate, repo_source: RepoSource, store: Store
) -> None:
    ec2 = _client(emulation, "ec2")
    sub = _Before(fast, 2, lambda env: ec2.terminate_instances(InstanceIds=[env.env_id]))
    row = _saved(store, run_rollout(sub, workloads.build("T1")))
    assert (row["status"], row["error_class"]) == ("failed", "environment_lost")
    assert row["n_actions_done"] == 1
    assert "terminated" in row["error_message"]
    assert row["cleanup_ok"] == 1


def test_a_timeout_is_enforced_on_the_instance_not_in_whole_seconds(
    emulation: Ec2Emulation, store: Store
) -> None:
    """SSM's executionTimeout is whole seconds; the kit's ``timeout`` wrapper stops the command
    at its own timeout, and SSM is never asked to cancel it."""
    sub = Ec2Substrate(poll_interval_s=0.05, **emulation.substrate_params())
    hang = Workload("T0", 0, 0, actions=(Action("exec", "sleep 30", timeout_s=0.3),))
    row = _saved(store, run_rollout(sub, hang))
    assert row["error_class"] == "action_timeout"
    assert "killed after 0.3 s (exit 124)" in row["error_message"]
    # The bound that tells the two apart is SSM's own: alone it would have stopped it at 2 s.
    assert 0.3 <= row["actions_s"] < 2.0
    assert emulation.requests["ssm:CancelCommand"] == 0


def test_no_result_past_the_backstop_is_cancelled_client_side(
    emulation: Ec2Emulation, store: Store
) -> None:
    """When SSM never reports an outcome (here the invocation stays invisible), the client gives
    up at the backstop (`kit.call_timeout`: 0.2 s, ``timeout``'s 1 s kill grace and 0.1 s of
    `command_grace_s`), cancels the command and reports a timeout."""
    sub = Ec2Substrate(command_grace_s=0.1, poll_interval_s=0.05, **emulation.substrate_params())

    def unreported(env: Environment) -> None:
        emulation.faults.fail("GetCommandInvocation", code="InvocationDoesNotExist", times=None)

    hang = Workload("T0", 0, 0, actions=(Action("exec", "sleep 30", timeout_s=0.2),))
    row = _saved(store, run_rollout(_Before(sub, 1, unreported), hang))
    assert row["error_class"] == "action_timeout"
    assert "cancelled" in row["error_message"]
    assert 1.3 <= row["actions_s"] < 2.5
    assert emulation.requests["ssm:CancelCommand"] == 1


# -- SSM details ------------------------------------------------------------------------------


@pytest.fixture
def env(emulation: Ec2Emulation) -> Iterator[tuple[Ec2Substrate, Environment]]:
    sub = Ec2Substrate(**emulation.substrate_params())
    # a run id (the launch's ClientToken) per test: a repeated token answers the first launch
    made = sub.create(f"ssm-details-{uuid.uuid4().hex[:8]}")
    try:
        sub.wait_running(made, DEADLINE_S)
        sub.run(made, "true", 60)
        yield sub, made
    finally:
        sub.destroy(made, 60)


def test_outputs_are_cut_at_ssm_limits(env: tuple[Ec2Substrate, Environment]) -> None:
    sub, made = env
    result = sub.run(
        made, "head -c 30000 /dev/zero | tr '\\0' o; head -c 9000 /dev/zero | tr '\\0' e >&2", 60
    )
    assert (result.stdout, result.stderr) == ("o" * STDOUT_LIMIT, "e" * STDERR_LIMIT)
    assert result.exit_code == 0


def test_workdir_and_multiline_commands(env: tuple[Ec2Substrate, Environment]) -> None:
    sub, made = env
    result = sub.run(made, 'pwd\nls -d attrs tools\necho "it\'s" | tr i I', 60)
    assert result.stdout == "/work\nattrs\ntools\nIt's\n"


def test_cancel_command_kills_the_process(
    emulation: Ec2Emulation, env: tuple[Ec2Substrate, Environment]
) -> None:
    sub, made = env
    ssm = _client(emulation, "ssm")
    sent = ssm.send_command(
        InstanceIds=[made.env_id],
        DocumentName="AWS-RunShellScript",
        Parameters={"commands": ["sleep 77"], "executionTimeout": ["60"]},
    )["Command"]["CommandId"]
    wait_for(
        lambda: sub.run(made, "pgrep -c -f '^sleep 77$' || true", 30).stdout == "1\n",
        "the command to start",
    )
    assert ssm.get_command_invocation(CommandId=sent, InstanceId=made.env_id)["Status"] == (
        "InProgress"
    )
    ssm.cancel_command(CommandId=sent, InstanceIds=[made.env_id])

    def ended() -> str | None:
        status = ssm.get_command_invocation(CommandId=sent, InstanceId=made.env_id)["Status"]
        return status if status in ("Cancelled", "Success", "Failed") else None

    assert wait_for(ended, "the cancelled command to end") == "Cancelled"
    assert sub.run(made, "pgrep -c -f '^sleep 77$' || true", 30).stdout == "0\n"


def test_failed_command_carries_the_agent_line_on_the_wire(
    emulation: Ec2Emulation, env: tuple[Ec2Substrate, Environment]
) -> None:
    sub, made = env
    ssm = _client(emulation, "ssm")
    sent = ssm.send_command(
        InstanceIds=[made.env_id],
        DocumentName="AWS-RunShellScript",
        Parameters={"commands": ["echo oops >&2; exit 3"]},
    )["Command"]["CommandId"]

    def ended() -> dict[str, Any] | None:
        inv = ssm.get_command_invocation(CommandId=sent, InstanceId=made.env_id)
        return None if inv["Status"] in ("Pending", "InProgress") else inv

    inv = wait_for(ended, "the failing command to end", interval_s=0.02)
    assert (inv["Status"], inv["ResponseCode"]) == ("Failed", 3)
    assert inv["StandardErrorContent"] == "oops\nfailed to run commands: exit status 3"
    assert sub.run(made, "echo oops >&2; exit 3", 30).stderr == "oops\n"  # stripped


# -- leftovers --------------------------------------------------------------------------------


def test_planted_leftover_is_listed_and_terminated(emulation: Ec2Emulation) -> None:
    sub = Ec2Substrate(name="ec2-planted", **emulation.substrate_params())
    other = Ec2Substrate(**emulation.substrate_params())
    env = sub.create("planted-leftover")
    sub.wait_running(env, DEADLINE_S)  # and never destroyed: a crashed run's instance
    found = [lo for lo in sub.leftovers() if lo.run_id == "planted-leftover"]
    assert [lo.env_id for lo in found] == [env.env_id]
    assert found[0].owner and found[0].created_at
    assert env.env_id not in [lo.env_id for lo in other.leftovers()]  # per substrate name
    sub.destroy(found[0], 300)
    assert _state(emulation, env.env_id) == "terminated"
    assert [lo for lo in sub.leftovers() if lo.run_id == "planted-leftover"] == []
    _wait_container_gone(emulation, env.env_id)


# -- only the API endpoint is ever contacted --------------------------------------------------


class _Connections:
    """Every socket connection opened by one thread, via the interpreter's audit hook (the one
    place every connect passes through, whichever library makes it)."""

    installed = False
    thread: int | None = None
    seen: ClassVar[list[Any]] = []

    @classmethod
    def hook(cls, event: str, args: tuple[Any, ...]) -> None:
        if event == "socket.connect" and threading.get_ident() == cls.thread:
            cls.seen.append(args[1])

    @classmethod
    def record(cls) -> list[Any]:
        if not cls.installed:
            sys.addaudithook(cls.hook)
            cls.installed = True
        cls.seen = []
        cls.thread = threading.get_ident()
        return cls.seen

    @classmethod
    def stop(cls) -> None:
        cls.thread = None


def test_only_the_api_endpoint_is_contacted(
    emulation: Ec2Emulation, repo_source: RepoSource
) -> None:
    sub = Ec2Substrate(**emulation.substrate_params())
    seen = _Connections.record()
    try:
        record = run_rollout(sub, workloads.build("T2", source=repo_source))
    finally:
        _Connections.stop()
    assert record.ok, record.run
    assert seen, "the audit hook saw no connection at all"
    assert {tuple(address) for address in seen} == {("127.0.0.1", emulation.port)}
    # the instance had addresses (moto gives each one), and the host address was configured
    instance = _client(emulation, "ec2").describe_instances(
        Filters=[{"Name": f"tag:{LABEL}.run_id", "Values": [record.run["run_id"]]}]
    )["Reservations"][0]["Instances"][0]
    addresses = {instance.get("PrivateIpAddress"), sub.host_address}
    assert not addresses & {address[0] for address in seen}


# -- credentials and configuration ------------------------------------------------------------


def test_credentials_never_reach_store_describe_or_messages(
    emulation: Ec2Emulation, store: Store, db_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    sentinel_id, sentinel = "AKIARTAXSENTINEL0001", "rtax-sentinel-secret-value"
    monkeypatch.delenv("AWS_PROFILE", raising=False)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", sentinel_id)
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", sentinel)
    params = {**emulation.substrate_params(), "fidelity": "real"}  # the default chain
    real = Ec2Substrate(**params)
    logged: list[str] = []
    real.prepare(logged.append)
    store.save_rollout(run_rollout(real, workloads.build("T0")))
    emulation.faults.fail("RunInstances", code="UnauthorizedOperation", times=None)
    store.save_rollout(run_rollout(real, workloads.build("T0")))
    emulated = Ec2Substrate(**emulation.substrate_params())
    store.save_rollout(run_rollout(emulated, workloads.build("T0")))
    store.close()
    files = b"".join(p.read_bytes() for p in db_path.parent.glob(f"{db_path.name}*"))
    kept = files + repr([real.describe(), emulated.describe(), logged]).encode()
    for secret in (sentinel_id, sentinel, EMULATION_KEY_ID, EMULATION_KEY):
        assert secret.encode() not in kept
    assert b"UnauthorizedOperation" in files  # the failure itself was kept


def test_no_parameter_is_named_like_a_secret_and_config_accepts_profile_env(
    tmp_path: Path,
) -> None:
    names = set(inspect.signature(Ec2Substrate.__init__).parameters)
    assert not [n for n in names if substrate_table._SECRET.search(n)]
    entry = tomllib.loads(
        """
        [[substrates]]
        name = "ec2-eu"
        kind = "ec2"
        [substrates.params]
        region = "eu-west-1"
        ami = "ami-0123456789abcdef0"
        instance_type = "c7i.large"
        subnet_id = "subnet-0abc"
        security_group_ids = ["sg-0abc"]
        instance_profile = "rtax-ssm"
        host_address = "10.0.0.5"
        profile_env = "AWS_PROFILE"
        """
    )
    parsed = config.parse(entry, base=tmp_path)
    assert parsed.substrates["ec2-eu"].params["profile_env"] == "AWS_PROFILE"


def test_prepare_and_host_address_say_what_to_fix() -> None:
    down = Ec2Substrate(
        fidelity="emulated", endpoint="http://127.0.0.1:9", ami="ami-1", api_timeout_s=1
    )
    with pytest.raises(SubstrateError, match="does not answer"):
        down.prepare(lambda message: None)
    with pytest.raises(SubstrateError, match="host_address"):
        require_host_address(down)
    with pytest.raises(SubstrateError, match="`ami`"):
        Ec2Substrate(fidelity="emulated", endpoint="http://127.0.0.1:9").prepare(print)
    with pytest.raises(ValueError, match="fidelity"):
        Ec2Substrate(fidelity="simulated")


# -- real AWS's eventual consistency (botocore's Stubber: the service models, no network) ------


def test_invocation_not_yet_visible_after_send_command_is_polled_again(
    emulation: Ec2Emulation, fast: Ec2Substrate, store: Store
) -> None:
    emulation.faults.fail("GetCommandInvocation", code="InvocationDoesNotExist", times=3)
    row = _saved(store, run_rollout(fast, workloads.build("T0")))
    assert row["status"] == "ok", row["error_message"]
    assert emulation.requests["ssm:GetCommandInvocation"] >= 3 + 2  # ready + action


def _stubbed() -> tuple[Ec2Substrate, Any, Any]:
    from botocore.stub import Stubber

    sub = Ec2Substrate(
        fidelity="emulated",
        endpoint="http://127.0.0.1:9",
        ami="ami-1",
        poll_interval_s=0.01,
        state_poll_interval_s=0.01,
    )
    ec2, ssm = Stubber(sub.ec2), Stubber(sub.ssm)
    ec2.activate()
    ssm.activate()
    return sub, ec2, ssm


_COMMAND_ID = "0b1c2d3e-4f50-4a6b-8c7d-9e0f1a2b3c4d"


def _instances(state: str) -> dict[str, Any]:
    return {"Reservations": [{"Instances": [{"InstanceId": "i-1", "State": {"Name": state}}]}]}


def test_an_instance_not_visible_yet_is_waited_for_not_failed() -> None:
    """Right after RunInstances, EC2 may answer InvalidInstanceID.NotFound for a while."""
    sub, ec2, _ = _stubbed()
    ec2.add_client_error("describe_instances", "InvalidInstanceID.NotFound")
    ec2.add_response("describe_instances", _instances("pending"))
    ec2.add_response("describe_instances", _instances("running"))
    env = Environment("i-1", "r")
    sub.wait_running(env, 10)
    assert [m.name for m in env.milestones] == ["running"]
    ec2.assert_no_pending_responses()


def test_terminate_of_an_instance_not_visible_yet_is_retried() -> None:
    sub, ec2, _ = _stubbed()
    ec2.add_client_error("terminate_instances", "InvalidInstanceID.NotFound")
    ec2.add_response("terminate_instances", {}, {"InstanceIds": ["i-1"]})
    ec2.add_response("describe_instances", _instances("shutting-down"))
    ec2.add_response("describe_instances", _instances("terminated"))
    sub.destroy(Environment("i-1", "r"), 10)
    ec2.assert_no_pending_responses()


def test_which_launch_failures_may_have_launched_an_instance() -> None:
    """Only a definite refusal means nothing runs; anything else is looked for and ended."""
    from botocore.exceptions import ClientError, EndpointConnectionError

    from rtax.core.failures import RateLimited
    from rtax.substrates.ec2.instances import may_have_launched

    def answer(code: str, status: int) -> ClientError:
        meta = {"HTTPStatusCode": status}
        return ClientError({"Error": {"Code": code}, "ResponseMetadata": meta}, "RunInstances")

    def gave_up(cause: BaseException) -> RateLimited:
        try:
            raise RateLimited("still throttled") from cause
        except RateLimited as exc:
            return exc

    refused = [
        answer("UnauthorizedOperation", 403),
        answer("InvalidAMIID.NotFound", 400),
        answer("InsufficientInstanceCapacity", 500),
        answer("RequestLimitExceeded", 503),
        gave_up(answer("RequestLimitExceeded", 503)),
    ]
    unknown = [
        answer("InternalError", 500),
        answer("Unavailable", 503),
        gave_up(answer("ServiceUnavailable", 503)),
        EndpointConnectionError(endpoint_url="http://127.0.0.1:9"),
        KeyboardInterrupt(),
    ]
    assert [may_have_launched(e) for e in refused] == [False] * len(refused)
    assert [may_have_launched(e) for e in unknown] == [True] * len(unknown)


def test_an_instance_never_visible_to_terminate_is_not_counted_as_gone() -> None:
    """Not found for as long as EC2 may hide a new instance is no proof of termination: the
    cleanup fails (the instance, if it runs, keeps its tags for the reaper)."""
    sub, ec2, _ = _stubbed()
    for _ in range(500):  # more than the polls that fit in the timeout
        ec2.add_client_error("terminate_instances", "InvalidInstanceID.NotFound")
    with pytest.raises(CleanupFailed, match="cannot verify that it is gone"):
        sub.destroy(Environment("i-1", "r"), 0.2)


def test_undeliverable_command_on_a_terminated_instance_is_environment_lost() -> None:
    from rtax.core.failures import EnvironmentLost

    sub, ec2, ssm = _stubbed()
    env = Environment("i-1", "r", handle={"agent_online": True})
    ssm.add_response("send_command", {"Command": {"CommandId": _COMMAND_ID}})
    ssm.add_client_error("get_command_invocation", "InvocationDoesNotExist")
    ssm.add_response(
        "get_command_invocation",
        {"Status": "Failed", "StatusDetails": "Undeliverable", "ResponseCode": -1},
    )
    ec2.add_response("describe_instances", _instances("terminated"))
    with pytest.raises(EnvironmentLost, match="terminated"):
        sub.run(env, "true", 10)
    ssm.assert_no_pending_responses()


# -- resolution (docs/measurement.md#resolution) ---------------------------------------------


def test_a_command_is_recorded_within_one_poll_interval_of_its_true_latency(
    env: tuple[Ec2Substrate, Environment], emulation: Ec2Emulation
) -> None:
    """rtax's latency of an SSM command against the emulated service's own clock readings:
    the command ran from `accepted` to `ended` (its true latency), and the client learned of
    the end when a GetCommandInvocation reported it (`reported`); the check before that one
    answered "not yet" at `asked` (or, when the first check already saw the end, the service
    accepted the command then). Polling may delay detection by the gap between those two
    checks, which rtax discloses as the resolution: at least the interval it paused, and never
    more than the service saw pass between the checks. The rest of what rtax records beyond the
    true latency is the client's own request legs, timed here around the call, not by rtax.
    Every bound is an ordering of clock readings, none a margin on how long a sleep or a request
    took, so a loaded machine (a sleep of 0.04 s that lasts 0.055) can't break it. The durations
    are the issue's examples: the old back-off recorded ~0.62 s and ~2.26 s."""
    sub, made = env
    assert sub.poll_interval_s == 0.04  # the default is what is checked
    for command in ("sleep 0.31", "sleep 1.27", "true"):
        before = clock()
        result = sub.run(made, command, 60)
        after = clock()
        assert result.exit_code == 0
        t = emulation.timings(made.env_id)[-1]
        assert t["ended"] is not None and t["reported"] is not None
        truth = t["ended"] - t["accepted"]
        gap = t["reported"] - (t["asked"] if t["asked"] is not None else t["accepted"])
        legs = (t["accepted"] - before) + (after - t["reported"])  # send and last answer
        late = result.latency_s - truth
        assert result.resolution_s is not None
        # the disclosed resolution: the pause it made, within the gap the service saw
        assert sub.poll_interval_s - 1e-3 <= result.resolution_s <= gap, (command, t)
        # detection: the end fell inside that gap
        assert 0 <= t["reported"] - t["ended"] <= gap, (command, t)
        # recorded: the true latency, the detection delay at most, and the client's legs
        assert late - legs <= t["reported"] - t["ended"] + 1e-6, (command, late, legs)
        assert late >= 0, command
