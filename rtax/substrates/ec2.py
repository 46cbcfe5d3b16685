"""The `ec2` substrate: one EC2 instance per rollout, commands through SSM Run Command.

Why these choices (docs/substrates/ec2.md):

- Only the AWS API endpoints are ever contacted (EC2 and SSM, through `boto3`): commands travel
  through SSM ``SendCommand`` (document ``AWS-RunShellScript``) and ``GetCommandInvocation``, never
  over SSH to an instance address. No inbound port, key pair or public address is needed, and the
  latency measured is the one a harness driving VMs through the AWS API pays.
- create = ``RunInstances`` (tagged ``rtax``, ``rtax.run_id``, ``rtax.substrate``, ``rtax.owner``,
  ``rtax.created_at``; instance-initiated shutdown = terminate, so an instance that powers itself
  off stops costing money); orchestration = ``pending`` -> ``running`` (``DescribeInstances``);
  ready = the SSM agent online (``DescribeInstanceInformation`` PingStatus ``Online``) and a first
  command succeeded; cleanup = ``TerminateInstances``, then wait for ``terminated``.
- An action is one ``SendCommand``, then ``GetCommandInvocation`` polled every
  `poll_interval_s` (fixed, 40 ms by default) with a deadline; instance and agent state every
  `state_poll_interval_s` (250 ms). The poll gap at detection is reported as the resolution of
  the action or phase (`rtax.substrates.poll`, docs/measurement.md#resolution), never hidden in it.
  Exit codes are SSM's ``ResponseCode``; stdout and stderr are kept apart. SSM keeps only the
  first 24,000 characters of stdout and 8,000 of stderr; the rest is lost (it would need an S3
  bucket). The SSM agent appends ``failed to run commands: exit status N`` to stderr of a
  failed command; that line is removed so stderr is the command's own.
- SSM's ``executionTimeout`` is a whole number of seconds, so a command's timeout is rounded up to
  the next second on the instance; past the timeout plus `command_grace_s` without an answer, the
  command is cancelled client-side. Either way the rollout sees `CommandTimeout`.
- botocore's own retries are switched off (``total_max_attempts=1``): throttling
  (``RequestLimitExceeded``, ``ThrottlingException``, HTTP 429/503 ...) is retried here, with
  exponential backoff bounded by `throttle_attempts` and `throttle_deadline_s`, so that the
  classification (``rate_limited`` once it persists) and the time spent waiting are deliberate.
- Error classes: RunInstances refused -> `CreateFailed`; the API not answering -> `CreateTimeout`
  (create), `ReadyTimeout` (waiting for running), `ExecError` (a command), `CleanupFailed`
  (terminate); an instance that goes from pending to shutting-down/terminated before it runs is
  a failed launch -> `CreateFailed` with EC2's state reason; an instance terminated under a
  running rollout -> `EnvironmentLost`; an agent not (yet) online -> `ExecError`, which the probe
  runner retries until its ready timeout (-> ``ready_timeout``).
- Credentials: for real use, boto3's default chain (environment, the named `profile`, an instance
  role). With ``fidelity="emulated"`` fixed fake keys are used instead and the environment's keys
  are never read, so a real key can't be sent to an emulation. No credential ever appears in
  describe(), messages or logs.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import os
import random
import re
import socket
import time
from collections.abc import Callable
from datetime import UTC, datetime
from importlib import metadata
from typing import Any

from rtax.substrates.base import (
    FIDELITIES,
    LABEL,
    CleanupFailed,
    CommandResult,
    CommandTimeout,
    CreateFailed,
    CreateTimeout,
    Environment,
    EnvironmentLost,
    ExecError,
    Leftover,
    RateLimited,
    ReadyTimeout,
    SubstrateError,
    clock,
    redacting,
)
from rtax.substrates.emulated import EmulationWatch
from rtax.substrates.poll import poll

#: Error codes that mean "slow down" across EC2 (Query) and SSM (JSON) and S3-style answers.
THROTTLE_CODES = frozenset(
    {
        "RequestLimitExceeded",
        "Throttling",
        "ThrottlingException",
        "ThrottledException",
        "RequestThrottled",
        "RequestThrottledException",
        "TooManyRequestsException",
        "SlowDown",
        "ProvisionedThroughputExceededException",
    }
)
THROTTLE_STATUS = frozenset({429, 503})
#: Fake keys for emulations only: obviously not secrets, never read from the environment.
EMULATION_KEY_ID = "rtax-emulated-key-id"
EMULATION_KEY = "rtax-emulated-not-a-secret"
#: Instance states in which an instance still exists (and still costs, or will).
#: How long a just-launched instance may stay invisible to the API (eventual consistency).
_VISIBLE_WITHIN_S = 30.0
_ALIVE = ("pending", "running", "stopping", "stopped", "shutting-down")
_GONE = ("shutting-down", "terminated")
#: GetCommandInvocation's terminal `Status` values (botocore's CommandInvocationStatus);
#: Undeliverable and Terminated are `StatusDetails` only (with a terminal Status).
_FINAL = ("Success", "Failed", "TimedOut", "Cancelled")
_NOT_RUN = ("Undeliverable", "Terminated")
#: SSM answers that no retry changes (permissions, an unknown document).
_REFUSALS = frozenset({"AccessDeniedException", "InvalidDocument", "UnauthorizedOperation"})
_AGENT_SUFFIX = re.compile(r"failed to run commands: exit status -?\d+\n?\Z")


def _boto3() -> Any:
    import boto3  # imported on first use: the registry stays cheap for other substrates

    return boto3


def _botocore_exceptions() -> Any:
    import botocore.exceptions

    return botocore.exceptions


def _code(exc: Any) -> str:
    return str(((getattr(exc, "response", None) or {}).get("Error") or {}).get("Code") or "")


def _status(exc: Any) -> int | None:
    meta = (getattr(exc, "response", None) or {}).get("ResponseMetadata") or {}
    return meta.get("HTTPStatusCode")


def is_throttle(exc: BaseException) -> bool:
    """A "slow down" answer: a throttling error code or an HTTP 429/503."""
    return _code(exc) in THROTTLE_CODES or _status(exc) in THROTTLE_STATUS


def _message(exc: Any) -> str:
    """One line naming the AWS error (code, status, message); never carries a credential."""
    error = (getattr(exc, "response", None) or {}).get("Error") or {}
    code, text = error.get("Code"), error.get("Message")
    if code:
        return f"{code} (HTTP {_status(exc)}): {text or ''}".strip()
    return f"{type(exc).__name__}: {exc}"


class Ec2Substrate:
    """One EC2 instance per rollout from `ami`, driven through SSM Run Command.

    `ami` must hold the runner's content at `workdir` (``attrs/``, ``tools/``) and a running SSM
    agent; `instance_profile` (name or ARN) must let that agent register (the managed policy
    AmazonSSMManagedInstanceCore); `subnet_id`/`security_group_ids` place it (outbound HTTPS to
    the SSM endpoints, and to `host_address` for T2's clone). `tags` are added to rtax's own.
    `endpoint` overrides both API endpoints (an emulation); `profile` names an AWS profile.
    """

    kind = "ec2"
    mode = "exec"

    def __init__(
        self,
        name: str = "ec2",
        fidelity: str = "real",
        region: str = "us-east-1",
        ami: str | None = None,
        instance_type: str = "t3.small",
        subnet_id: str | None = None,
        security_group_ids: list[str] | None = None,
        instance_profile: str | None = None,
        tags: dict[str, str] | None = None,
        profile: str | None = None,
        endpoint: str | None = None,
        host_address: str | None = None,
        workdir: str = "/work",
        api_timeout_s: float = 30.0,
        throttle_attempts: int = 8,
        throttle_backoff_s: float = 0.5,
        throttle_deadline_s: float = 120.0,
        poll_interval_s: float = 0.04,
        state_poll_interval_s: float = 0.25,
        agent_wait_s: float = 5.0,
        command_grace_s: float = 30.0,
    ) -> None:
        if fidelity not in FIDELITIES:
            raise ValueError(f"fidelity must be one of {', '.join(FIDELITIES)}, got {fidelity!r}")
        if throttle_attempts < 1:
            raise ValueError("throttle_attempts must be >= 1")
        if poll_interval_s <= 0 or state_poll_interval_s <= 0:
            raise ValueError("poll_interval_s and state_poll_interval_s must be > 0")
        self.name = name
        self._fidelity = fidelity
        #: an rtax emulation's answer makes the samples `emulated`, whatever was configured
        self.emulation = EmulationWatch()
        self.region = region
        self.ami = ami
        self.instance_type = instance_type
        self.subnet_id = subnet_id
        self.security_group_ids = list(security_group_ids or [])
        self.instance_profile = instance_profile
        self.tags = dict(tags or {})
        self.profile = profile
        self.endpoint = endpoint
        #: where an instance reaches this host: only the user knows the route back from the VPC
        self.host_address = host_address
        self.workdir = workdir
        self.api_timeout_s = api_timeout_s
        self.throttle_attempts = throttle_attempts
        self.throttle_backoff_s = throttle_backoff_s
        self.throttle_deadline_s = throttle_deadline_s
        # Fixed poll intervals (docs/measurement.md#resolution). EC2 throttles each API per account
        # and region with a token bucket; its documented non-mutating bucket (DescribeInstances'
        # kind) refills at 20 requests/s, so one rollout polling instance state every 250 ms
        # (4/s) leaves room for a few concurrent rollouts, and instance state changes take
        # seconds on a real account (250 ms stays under 5 % of them). SSM throttles per API,
        # account and region too (its quotas: the AWS General Reference, "Systems Manager
        # endpoints and quotas"; they can be raised). GetCommandInvocation is polled every
        # 40 ms, 25 requests/s per command in flight, because its detection gap lands in every
        # action's latency and actions take tenths of seconds: with the round trips, a command
        # is recorded within 60 ms of its end. Raise it for many concurrent rollouts on one
        # account (a throttled poll is retried; if throttling persists, `rate_limited`).
        self.poll_interval_s = poll_interval_s
        self.state_poll_interval_s = state_poll_interval_s
        self.agent_wait_s = agent_wait_s
        self.command_grace_s = command_grace_s
        self._owner = f"{socket.gethostname()}:{os.getpid()}"
        from botocore.config import Config

        config = Config(
            region_name=region,
            # botocore's retry layer off: throttling is retried and classified here
            retries={"total_max_attempts": 1, "mode": "standard"},
            connect_timeout=api_timeout_s,
            read_timeout=api_timeout_s,
            user_agent_extra="rtax",
        )
        boto3 = _boto3()
        if fidelity == "emulated":
            session = boto3.session.Session(
                aws_access_key_id=EMULATION_KEY_ID,
                aws_secret_access_key=EMULATION_KEY,
                region_name=region,
            )
        else:
            session = boto3.session.Session(profile_name=profile, region_name=region)
        self._session = session
        self.ec2 = session.client("ec2", endpoint_url=endpoint, config=config)
        self.ssm = session.client("ssm", endpoint_url=endpoint, config=config)
        self.emulation.watch_boto3(self.ec2)
        self.emulation.watch_boto3(self.ssm)

    @property
    def fidelity(self) -> str:
        return self.emulation.fidelity(self._fidelity)

    def _secrets(self) -> list[str]:
        """What `redacting` keeps out of every error leaving this substrate: the session's
        secret key and session token (AWS never echoes them, but nothing here relies on it)."""
        try:
            creds = self._session.get_credentials()
        except Exception:  # no credentials: nothing to keep out
            return []
        if creds is None:
            return []
        frozen = creds.get_frozen_credentials()
        return [s for s in (frozen.secret_key, frozen.token) if s]

    # -- calls: throttling retried, everything else classified by the caller -------------------

    def _call(self, client: Any, operation: str, **kwargs: Any) -> dict[str, Any]:
        """One API call; throttling answers are retried with exponential backoff (jittered,
        bounded by attempts and a deadline) and raise `RateLimited` once they persist."""
        errors = _botocore_exceptions()
        method = getattr(client, operation)
        deadline = clock() + self.throttle_deadline_s
        delay = self.throttle_backoff_s
        for attempt in range(1, self.throttle_attempts + 1):
            try:
                return method(**kwargs)
            except errors.ClientError as exc:
                if not is_throttle(exc):
                    raise
                pause = delay * random.uniform(0.5, 1.0)
                if attempt == self.throttle_attempts or clock() + pause > deadline:
                    raise RateLimited(
                        f"{operation}: still throttled after {attempt} attempts: {_message(exc)}"
                    ) from exc
                time.sleep(pause)  # backing off is the point: the service asked for it
                delay = min(delay * 2, 20.0)
        raise AssertionError("unreachable")

    # -- life of one environment ------------------------------------------------------------

    @redacting
    def create(self, run_id: str) -> Environment:
        errors = _botocore_exceptions()
        if not self.ami:
            raise CreateFailed("no AMI configured: set the ec2 substrate's `ami` parameter")
        tags = {
            **self.tags,
            "Name": f"rtax-{run_id}",
            LABEL: "1",
            f"{LABEL}.run_id": run_id,
            f"{LABEL}.created_at": datetime.now(UTC).isoformat(),
            f"{LABEL}.owner": self._owner,
            f"{LABEL}.substrate": self.name,
        }
        tag_list = [{"Key": k, "Value": v} for k, v in tags.items()]
        request: dict[str, Any] = {
            "ImageId": self.ami,
            "InstanceType": self.instance_type,
            "MinCount": 1,
            "MaxCount": 1,
            "InstanceInitiatedShutdownBehavior": "terminate",
            "TagSpecifications": [
                {"ResourceType": "instance", "Tags": tag_list},
                {"ResourceType": "volume", "Tags": tag_list},
            ],
            # idempotent: a throttled-then-retried launch can't make two instances
            "ClientToken": run_id[:64],
        }
        if self.subnet_id:
            request["SubnetId"] = self.subnet_id
        if self.security_group_ids:
            request["SecurityGroupIds"] = self.security_group_ids
        if self.instance_profile:
            key = "Arn" if self.instance_profile.startswith("arn:") else "Name"
            request["IamInstanceProfile"] = {key: self.instance_profile}
        try:
            answer = self._call(self.ec2, "run_instances", **request)
        except errors.ClientError as exc:
            raise CreateFailed(f"RunInstances refused: {_message(exc)}") from exc
        except errors.NoCredentialsError as exc:
            raise CreateFailed(_NO_CREDENTIALS) from exc
        except RateLimited:
            raise  # every attempt was answered "slow down": nothing was launched
        except BaseException as exc:
            # The instance may have been launched before the answer was lost (a transport
            # timeout, Ctrl-C): recover its id through the ClientToken and terminate it.
            self._terminate_lost_launch(request, run_id)
            if isinstance(exc, _transport_errors()):
                raise CreateTimeout(f"RunInstances: {exc}") from exc
            raise
        instance_id = answer["Instances"][0]["InstanceId"]
        env = Environment(env_id=instance_id, run_id=run_id, handle={})
        env.mark("created")
        return env

    @redacting
    def wait_running(self, env: Environment, timeout_s: float) -> None:
        errors = _botocore_exceptions()
        last: list[str | None] = [None]

        def running() -> bool | None:
            instance = self._describe(env.env_id)
            state = last[0] = (instance or {}).get("State", {}).get("Name")
            # None: not visible yet. EC2 is eventually consistent, and DescribeInstances may
            # answer InvalidInstanceID.NotFound for a while after RunInstances; a failed
            # launch stays visible as shutting-down/terminated with its reason.
            if state in _GONE:
                reason = (instance or {}).get("StateReason", {}).get("Message", "gone")
                raise CreateFailed(f"instance {env.env_id} {state} at launch: {reason}")
            return True if state == "running" else None

        try:
            found = poll(
                running,
                interval_s=self.state_poll_interval_s,
                deadline=clock() + timeout_s,
                timeout=lambda: ReadyTimeout(
                    f"instance {env.env_id} {last[0] or 'not visible'} after {timeout_s:g} s"
                ),
            )
            env.resolved("orchestration", found.resolution_s)
            env.mark("running")
        except errors.ClientError as exc:
            raise CreateFailed(f"DescribeInstances: {_message(exc)}") from exc
        except _transport_errors() as exc:
            raise ReadyTimeout(f"DescribeInstances: {exc}") from exc

    @redacting
    def run(self, env: Environment, command: str, timeout_s: float) -> CommandResult:
        errors = _botocore_exceptions()
        t0 = clock()
        try:
            waited = 0.0
            if not env.handle.get("agent_online"):
                waited = self._wait_agent(env, min(timeout_s, self.agent_wait_s))
            result = self._send(env, command, timeout_s, t0)
            if waited:  # the command's latency includes a polled wait for the agent
                result = dataclasses.replace(
                    result, resolution_s=(result.resolution_s or 0.0) + waited
                )
        except errors.ClientError as exc:
            error = ExecError(f"SSM: {_message(exc)}")
            # no retry in the ready phase can change a refusal (base.SubstrateError.permanent)
            error.permanent = _code(exc) in _REFUSALS
            raise error from exc
        except _transport_errors() as exc:
            raise ExecError(f"SSM: {exc}") from exc
        if result.exit_code == 0 and not env.handle.get("first_command"):
            env.handle["first_command"] = True
            env.mark("first_command")
        return result

    def _wait_agent(self, env: Environment, wait_s: float) -> float:
        """Poll DescribeInstanceInformation until the instance's agent is Online (within
        `wait_s`), else `ExecError`: the probe runner retries it until its ready timeout.
        Returns the poll's resolution."""
        last: list[str | None] = [None]

        def online() -> bool | None:
            answer = self._call(
                self.ssm,
                "describe_instance_information",
                Filters=[{"Key": "InstanceIds", "Values": [env.env_id]}],
            )
            info = answer.get("InstanceInformationList") or []
            last[0] = info[0].get("PingStatus") if info else None
            return True if last[0] == "Online" else None

        def not_online() -> Exception:
            self._check_alive(env)  # EnvironmentLost if the instance is gone
            return ExecError(f"SSM agent of {env.env_id} not online ({last[0] or 'unregistered'})")

        found = poll(
            online,
            interval_s=self.state_poll_interval_s,
            deadline=clock() + wait_s,
            timeout=not_online,
        )
        env.handle["agent_online"] = True
        env.mark("agent_online")
        return found.resolution_s

    def _send(self, env: Environment, command: str, timeout_s: float, t0: float) -> CommandResult:
        errors = _botocore_exceptions()
        try:
            sent = self._call(
                self.ssm,
                "send_command",
                InstanceIds=[env.env_id],
                DocumentName="AWS-RunShellScript",
                Parameters={
                    "commands": [command],
                    "executionTimeout": [str(max(1, math.ceil(timeout_s)))],
                    "workingDirectory": [self.workdir],
                },
                Comment=f"rtax {env.run_id}"[:100],
            )
        except errors.ClientError as exc:
            if _code(exc) == "InvalidInstanceId":
                self._check_alive(env)  # EnvironmentLost if terminated under us
            raise
        command_id = sent["Command"]["CommandId"]
        last: list[Any] = [None]

        def finished() -> dict[str, Any] | None:
            try:
                inv = self._call(
                    self.ssm,
                    "get_command_invocation",
                    CommandId=command_id,
                    InstanceId=env.env_id,
                )
            except errors.ClientError as exc:
                if _code(exc) != "InvocationDoesNotExist":  # not yet visible: eventual
                    raise
                inv = {"Status": "Pending"}
            last[0] = inv.get("Status")
            return inv if last[0] in _FINAL else None

        def no_result() -> Exception:
            self._cancel(command_id, env.env_id)
            self._lost_or_not(env)  # a terminated instance's command never finishes
            return CommandTimeout(
                f"no result {timeout_s + self.command_grace_s:.3g} s after sending "
                f"(status {last[0]}); cancelled"
            )

        # SSM has no push for results: poll at a fixed interval, first after one interval (a
        # command just sent has not finished), and disclose the gap at detection.
        found = poll(
            finished,
            interval_s=self.poll_interval_s,
            deadline=t0 + timeout_s + self.command_grace_s,
            timeout=no_result,
            pause_first=True,
        )
        inv, status = found.value, last[0]
        latency = clock() - t0
        details = str(inv.get("StatusDetails") or "")
        if status == "TimedOut":
            if "deliver" in details.lower():
                self._check_alive(env)
                raise ExecError(f"command not delivered to {env.env_id} ({details})")
            self._lost_or_not(env)
            raise CommandTimeout(f"killed after {timeout_s:.3g} s ({details or status})")
        if status == "Cancelled" or details in _NOT_RUN:
            self._check_alive(env)
            raise ExecError(f"command {status} ({details})")
        code = int(inv.get("ResponseCode", -1))
        if code < 0:
            raise ExecError(f"command {status} without an exit code ({details})")
        stderr = str(inv.get("StandardErrorContent") or "")
        if code != 0:
            stderr = _AGENT_SUFFIX.sub("", stderr)
        return CommandResult(
            code,
            str(inv.get("StandardOutputContent") or ""),
            stderr,
            latency,
            resolution_s=found.resolution_s,
        )

    def _cancel(self, command_id: str, instance_id: str) -> None:
        """Best effort: the command is already being given up on."""
        with contextlib.suppress(Exception):  # a failed cancel must not hide the timeout
            self._call(self.ssm, "cancel_command", CommandId=command_id, InstanceIds=[instance_id])

    def _lost_or_not(self, env: Environment) -> None:
        """`EnvironmentLost` if the instance is gone; any other failure to tell is ignored, so
        that the caller's own error (a timeout) stands."""
        try:
            self._check_alive(env)
        except EnvironmentLost:
            raise
        except (SubstrateError, *_client_and_transport_errors()):
            pass

    def _check_alive(self, env: Environment) -> None:
        """Raise `EnvironmentLost` if the instance is gone or going."""
        instance = self._describe(env.env_id)
        state = (instance or {}).get("State", {}).get("Name")
        if instance is None or state in _GONE:
            raise EnvironmentLost(f"instance {env.env_id} is {state or 'gone'}")

    def _describe(self, instance_id: str) -> dict[str, Any] | None:
        errors = _botocore_exceptions()
        try:
            answer = self._call(self.ec2, "describe_instances", InstanceIds=[instance_id])
        except errors.ClientError as exc:
            if _code(exc) == "InvalidInstanceID.NotFound":
                return None
            raise
        for reservation in answer.get("Reservations") or []:
            for instance in reservation.get("Instances") or []:
                return instance
        return None

    @redacting
    def destroy(self, env: Environment, timeout_s: float) -> None:
        env.resolved("cleanup", self._terminate_and_wait(env.env_id, timeout_s))
        env.mark("terminated")

    def _terminate_and_wait(self, instance_id: str, timeout_s: float) -> float:
        """Terminate, then poll until terminated; returns the resolution of both polls."""
        errors = _botocore_exceptions()
        deadline = clock() + timeout_s
        unseen_until = min(deadline, clock() + _VISIBLE_WITHIN_S)
        last: list[str | None] = [None]

        def terminating() -> bool | None:
            try:
                self._call(self.ec2, "terminate_instances", InstanceIds=[instance_id])
                return True
            except errors.ClientError as exc:
                if _code(exc) != "InvalidInstanceID.NotFound":
                    raise
            # Not found: not visible yet (just launched: EC2 is eventually consistent), or
            # terminated so long ago that EC2 forgot it (about an hour).
            return None

        def terminated() -> bool | None:
            instance = self._describe(instance_id)
            last[0] = (instance or {}).get("State", {}).get("Name")
            return True if instance is None or last[0] == "terminated" else None

        class _NeverSeen(Exception):
            pass

        try:
            try:
                sent = poll(
                    terminating,
                    interval_s=self.state_poll_interval_s,
                    deadline=unseen_until,
                    timeout=_NeverSeen,
                )
            except _NeverSeen:
                return 0.0  # never visible: nothing to terminate, nothing was waited for
            gone = poll(
                terminated,
                interval_s=self.state_poll_interval_s,
                deadline=deadline,
                timeout=lambda: CleanupFailed(
                    f"instance {instance_id} still {last[0]} after {timeout_s:g} s"
                ),
            )
            return sent.resolution_s + gone.resolution_s
        except (RateLimited, errors.ClientError, *_transport_errors()) as exc:
            text = _message(exc) if isinstance(exc, errors.ClientError) else str(exc)
            raise CleanupFailed(f"terminate {instance_id}: {text}") from exc

    def _terminate_lost_launch(self, request: dict[str, Any], run_id: str) -> None:
        """Best effort after a lost RunInstances answer. The same request with the same
        ClientToken is idempotent: it answers the instance the lost request launched (or
        launches one if it never arrived), which is then terminated. The search by run id tag
        is the fallback only: DescribeInstances may not show a new instance for a while."""
        with contextlib.suppress(Exception):  # the original failure is what the row reports
            answer = self._call(self.ec2, "run_instances", **request)
            ids = [i["InstanceId"] for i in answer.get("Instances") or []]
            self._call(self.ec2, "terminate_instances", InstanceIds=ids)
            return
        with contextlib.suppress(Exception):
            for leftover in self._find([{"Name": f"tag:{LABEL}.run_id", "Values": [run_id]}]):
                self._call(self.ec2, "terminate_instances", InstanceIds=[leftover.env_id])

    @redacting
    def leftovers(self) -> list[Leftover]:
        return self._find([])

    def _find(self, extra_filters: list[dict[str, Any]]) -> list[Leftover]:
        filters = [
            {"Name": "tag-key", "Values": [LABEL]},
            {"Name": f"tag:{LABEL}.substrate", "Values": [self.name]},
            {"Name": "instance-state-name", "Values": list(_ALIVE)},
            *extra_filters,
        ]
        found = []
        token: str | None = None
        while True:
            kwargs: dict[str, Any] = {"Filters": filters}
            if token:
                kwargs["NextToken"] = token
            answer = self._call(self.ec2, "describe_instances", **kwargs)
            for reservation in answer.get("Reservations") or []:
                for instance in reservation.get("Instances") or []:
                    tags = {t["Key"]: t["Value"] for t in instance.get("Tags") or []}
                    launched = instance.get("LaunchTime")
                    found.append(
                        Leftover(
                            env_id=instance["InstanceId"],
                            run_id=tags.get(f"{LABEL}.run_id"),
                            created_at=tags.get(f"{LABEL}.created_at")
                            or (launched.isoformat() if launched else None),
                            owner=tags.get(f"{LABEL}.owner"),
                            detail=f"{self.name}, {instance.get('State', {}).get('Name')}",
                        )
                    )
            token = answer.get("NextToken")
            if not token:
                return found

    def close(self) -> None:
        """Close both API clients' connection pools."""
        self.ec2.close()
        self.ssm.close()

    @redacting
    def prepare(self, log: Callable[[str], None]) -> None:
        """Check that the API answers, credentials work and the AMI exists (one-line errors)."""
        errors = _botocore_exceptions()
        where = self.endpoint or f"EC2 in {self.region}"
        if not self.ami:
            raise SubstrateError("no AMI configured: set the ec2 substrate's `ami` parameter")
        try:
            images = self._call(self.ec2, "describe_images", ImageIds=[self.ami])["Images"]
        except errors.NoCredentialsError:
            raise SubstrateError(_NO_CREDENTIALS) from None
        except errors.ClientError as exc:
            if _code(exc).startswith("InvalidAMIID"):
                raise SubstrateError(f"AMI {self.ami} not found in {self.region}") from None
            raise SubstrateError(f"{where}: {_message(exc)}") from None
        except _transport_errors() as exc:
            raise SubstrateError(f"{where} does not answer: {exc}") from None
        if not images:
            raise SubstrateError(f"AMI {self.ami} not found in {self.region}")
        log(f"ec2: {where} answers; AMI {self.ami} ({images[0].get('Name') or 'unnamed'})")

    def describe(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "endpoint": self.ec2.meta.endpoint_url,
            "ssm_endpoint": self.ssm.meta.endpoint_url,
            "region": self.region,
            "image": self.ami,
            "ami": self.ami,
            "instance_type": self.instance_type,
            "subnet_id": self.subnet_id,
            "security_group_ids": self.security_group_ids,
            "instance_profile": self.instance_profile,
            "tags": self.tags,
            "profile": self.profile,
            "workdir": self.workdir,
            "fidelity": self.fidelity,
            "actions": "ssm:AWS-RunShellScript",
            # polling granularity and waits are part of every figure taken
            "poll_interval_s": self.poll_interval_s,
            "state_poll_interval_s": self.state_poll_interval_s,
            "agent_wait_s": self.agent_wait_s,
            "command_grace_s": self.command_grace_s,
            "api_timeout_s": self.api_timeout_s,
            "throttle": {
                "attempts": self.throttle_attempts,
                "backoff_s": self.throttle_backoff_s,
                "deadline_s": self.throttle_deadline_s,
            },
            "client": {
                "boto3": metadata.version("boto3"),
                "botocore": metadata.version("botocore"),
            },
        }


_NO_CREDENTIALS = (
    "no AWS credentials found: set the environment (AWS_ACCESS_KEY_ID/AWS_PROFILE), "
    "the ec2 substrate's `profile` parameter, or run on an instance with a role"
)


def _client_and_transport_errors() -> tuple[type[BaseException], ...]:
    return (_botocore_exceptions().ClientError, *_transport_errors())


def _transport_errors() -> tuple[type[BaseException], ...]:
    errors = _botocore_exceptions()
    return (errors.ConnectionError, errors.HTTPClientError)
