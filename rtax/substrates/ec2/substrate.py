"""The `ec2` substrate's protocol methods: each step of a rollout, and its errors classified.

Why this file holds so little: the API (`api`), the instances (`instances`) and the commands
(`ssm`) are where EC2 and SSM differ from other kinds; here they become the protocol's eight
steps, and each AWS failure becomes the one error class the probe runner records for that step
(a refusal at launch is ``create_failed``, the API not answering is the step's timeout class,
throttling that persists is ``rate_limited``). Rate-limit waits are kept on the environment
they slowed down, including the launch's, which happen before it exists.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

from rtax.core.failures import CreateFailed, CreateTimeout, ExecError, ReadyTimeout, SubstrateError
from rtax.substrates import kit
from rtax.substrates.base import (
    FIDELITIES,
    CommandResult,
    Environment,
    Leftover,
    RateLimitWait,
    clock,
    redacting,
)
from rtax.substrates.ec2 import instances as inst
from rtax.substrates.ec2.api import (
    NO_CREDENTIALS,
    Aws,
    botocore_errors,
    code,
    message,
    transport_errors,
)
from rtax.substrates.ec2.ssm import REFUSALS, Commands


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
        rate_limit_attempts: int = 8,
        rate_limit_base_s: float = 0.5,
        rate_limit_max_s: float = 20.0,
        rate_limit_deadline_s: float = 120.0,
        poll_interval_s: float = 0.04,
        state_poll_interval_s: float = 0.25,
        agent_wait_s: float = 5.0,
        command_grace_s: float = 30.0,
    ) -> None:
        if fidelity not in FIDELITIES:
            raise ValueError(f"fidelity must be one of {', '.join(FIDELITIES)}, got {fidelity!r}")
        if poll_interval_s <= 0 or state_poll_interval_s <= 0:
            raise ValueError("poll_interval_s and state_poll_interval_s must be > 0")
        self.name = name
        self._fidelity = fidelity
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
        self.rate_limit = kit.RetryPolicy(
            attempts=rate_limit_attempts,
            base_s=rate_limit_base_s,
            max_s=rate_limit_max_s,
            deadline_s=rate_limit_deadline_s,
        )
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
        self._connect()

    def _connect(self) -> None:
        """The clients (boto3's EC2 and SSM), the instances and the commands they run."""
        self.aws = Aws(
            fidelity=self._fidelity,
            region=self.region,
            profile=self.profile,
            endpoint=self.endpoint,
            api_timeout_s=self.api_timeout_s,
            rate_limit=self.rate_limit,
        )
        self.ec2, self.ssm = self.aws.ec2, self.aws.ssm
        self.instances = inst.Instances(self.aws, self.name, self.state_poll_interval_s)
        self.commands = Commands(
            self.aws,
            self.instances,
            workdir=self.workdir,
            interval_s=self.poll_interval_s,
            state_interval_s=self.state_poll_interval_s,
            grace_s=self.command_grace_s,
        )

    @property
    def fidelity(self) -> str:
        return self.aws.emulation.fidelity(self._fidelity)

    def _secrets(self) -> list[str]:
        """What `redacting` keeps out of every error leaving this substrate."""
        return self.aws.secrets()

    # -- life of one environment ------------------------------------------------------------

    @redacting
    def create(self, run_id: str, *, lifetime_s: float | None = None) -> Environment:
        errors = botocore_errors()
        if not self.ami:
            raise CreateFailed("no AMI configured: set the ec2 substrate's `ami` parameter")
        request = inst.launch_request(
            run_id,
            self.name,
            ami=self.ami,
            instance_type=self.instance_type,
            tags=self.tags,
            subnet_id=self.subnet_id,
            security_group_ids=self.security_group_ids,
            instance_profile=self.instance_profile,
            lifetime_s=lifetime_s,
        )
        waits: list[RateLimitWait] = []
        try:
            answer = self.aws.call(self.ec2, "run_instances", waits=waits, **request)
        except errors.NoCredentialsError as exc:
            raise CreateFailed(NO_CREDENTIALS) from exc  # nothing was sent
        except BaseException as exc:
            if inst.may_have_launched(exc):
                # The instance may have been launched before the answer was lost or turned
                # into an error (a transport timeout, a 500 InternalError, Ctrl-C): recover it
                # through the ClientToken and terminate it; what can't be is tagged for the
                # reaper (docs/substrates/docker.md#reaper).
                self.instances.terminate_lost_launch(request, run_id)
            if isinstance(exc, errors.ClientError):
                raise CreateFailed(f"RunInstances refused: {message(exc)}") from exc
            if isinstance(exc, transport_errors()):
                raise CreateTimeout(f"RunInstances: {exc}") from exc
            raise
        instance_id = answer["Instances"][0]["InstanceId"]
        env = Environment(env_id=instance_id, run_id=run_id, handle={})
        env.rate_limit_waits.extend(waits)
        env.mark("created")
        return env

    @redacting
    def wait_running(self, env: Environment, timeout_s: float) -> None:
        errors = botocore_errors()
        last: list[str | None] = [None]

        def running() -> bool | None:
            instance = self.instances.describe(env.env_id, env.rate_limit_waits)
            state = last[0] = (instance or {}).get("State", {}).get("Name")
            # None: not visible yet. EC2 is eventually consistent, and DescribeInstances may
            # answer InvalidInstanceID.NotFound for a while after RunInstances; a failed
            # launch stays visible as shutting-down/terminated with its reason.
            if state in inst.GONE:
                reason = (instance or {}).get("StateReason", {}).get("Message", "gone")
                raise CreateFailed(f"instance {env.env_id} {state} at launch: {reason}")
            return True if state == "running" else None

        try:
            found = kit.poll(
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
            raise CreateFailed(f"DescribeInstances: {message(exc)}") from exc
        except transport_errors() as exc:
            raise ReadyTimeout(f"DescribeInstances: {exc}") from exc

    @redacting
    def run(self, env: Environment, command: str, timeout_s: float) -> CommandResult:
        errors = botocore_errors()
        t0 = clock()
        try:
            waited = 0.0
            if not env.handle.get("agent_online"):
                waited = self.commands.wait_agent(env, min(timeout_s, self.agent_wait_s))
            result = self.commands.send(env, command, timeout_s, t0)
            if waited:  # the command's latency includes a polled wait for the agent
                result = dataclasses.replace(
                    result, resolution_s=(result.resolution_s or 0.0) + waited
                )
        except errors.ClientError as exc:
            error = ExecError(f"SSM: {message(exc)}")
            # no retry in the ready phase can change a refusal (base.SubstrateError.permanent)
            error.permanent = code(exc) in REFUSALS
            raise error from exc
        except transport_errors() as exc:
            raise ExecError(f"SSM: {exc}") from exc
        return kit.first_command(env, result)

    @redacting
    def destroy(self, env: Environment, timeout_s: float) -> None:
        resolution = self.instances.terminate_and_wait(env.env_id, timeout_s, env.rate_limit_waits)
        env.resolved("cleanup", resolution)
        env.mark("terminated")

    @redacting
    def leftovers(self) -> list[Leftover]:
        return self.instances.find()

    # -- around rollouts ----------------------------------------------------------------------

    def close(self) -> None:
        """Close both API clients' connection pools."""
        self.aws.close()

    @redacting
    def prepare(self, log: Callable[[str], None]) -> None:
        """Check that the API answers, credentials work and the AMI exists (one-line errors)."""
        errors = botocore_errors()
        where = self.endpoint or f"EC2 in {self.region}"
        if not self.ami:
            raise SubstrateError("no AMI configured: set the ec2 substrate's `ami` parameter")
        try:
            images = self.aws.call(self.ec2, "describe_images", ImageIds=[self.ami])["Images"]
        except errors.NoCredentialsError:
            raise SubstrateError(NO_CREDENTIALS) from None
        except errors.ClientError as exc:
            if code(exc).startswith("InvalidAMIID"):
                raise SubstrateError(f"AMI {self.ami} not found in {self.region}") from None
            raise SubstrateError(f"{where}: {message(exc)}") from None
        except transport_errors() as exc:
            raise SubstrateError(f"{where} does not answer: {exc}") from None
        if not images:
            raise SubstrateError(f"AMI {self.ami} not found in {self.region}")
        log(f"ec2: {where} answers; AMI {self.ami} ({images[0].get('Name') or 'unnamed'})")

    def describe(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            **self.aws.describe(),  # endpoints, the rate-limit policy, client versions
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
        }
