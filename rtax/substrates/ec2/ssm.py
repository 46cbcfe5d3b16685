"""Commands on an ec2 instance through SSM Run Command, never over SSH.

Why SSM: only the AWS API endpoints are ever contacted, so no inbound port, key pair or public
address is needed, and the latency measured is the one a harness driving VMs through the AWS
API pays. SSM has no push for results, so ``GetCommandInvocation`` is polled at a fixed interval
and the gap at detection is the action's resolution (`kit.poll`). SSM's own timeout
(``executionTimeout``) is whole seconds, so the command's timeout is enforced on the instance by
the kit's ``timeout`` wrapper, as in every kind; SSM's and the client's deadlines are backstops.
"""

from __future__ import annotations

import contextlib
import math
import re
from typing import Any

from rtax.core.failures import CommandTimeout, ExecError
from rtax.substrates import kit
from rtax.substrates.base import CommandResult, Environment, clock
from rtax.substrates.ec2.api import Aws, botocore_errors, code
from rtax.substrates.ec2.instances import Instances

#: GetCommandInvocation's terminal `Status` values (botocore's CommandInvocationStatus);
#: Undeliverable and Terminated are `StatusDetails` only (with a terminal Status).
FINAL = ("Success", "Failed", "TimedOut", "Cancelled")
NOT_RUN = ("Undeliverable", "Terminated")
#: SSM answers that no retry changes (permissions, an unknown document).
REFUSALS = frozenset({"AccessDeniedException", "InvalidDocument", "UnauthorizedOperation"})
#: The line the SSM agent appends to a failed command's stderr (not the command's own).
AGENT_SUFFIX = re.compile(r"failed to run commands: exit status -?\d+\n?\Z")


class Commands:
    """Shell commands through ``AWS-RunShellScript`` in `workdir`; a result is polled every
    `interval_s`, the agent's state every `state_interval_s`, and a command without a result
    `grace_s` past its timeout (and ``timeout``'s kill grace) is cancelled."""

    def __init__(
        self,
        aws: Aws,
        instances: Instances,
        *,
        workdir: str,
        interval_s: float,
        state_interval_s: float,
        grace_s: float,
    ) -> None:
        self.aws = aws
        self.instances = instances
        self.workdir = workdir
        self.interval_s = interval_s
        self.state_interval_s = state_interval_s
        self.grace_s = grace_s

    def wait_agent(self, env: Environment, wait_s: float) -> float:
        """Poll DescribeInstanceInformation until the instance's agent is Online (within
        `wait_s`), else `ExecError`: the probe runner retries it until its ready timeout.
        Returns the poll's resolution."""
        last: list[str | None] = [None]

        def online() -> bool | None:
            answer = self.aws.call(
                self.aws.ssm,
                "describe_instance_information",
                waits=env.rate_limit_waits,
                Filters=[{"Key": "InstanceIds", "Values": [env.env_id]}],
            )
            info = answer.get("InstanceInformationList") or []
            last[0] = info[0].get("PingStatus") if info else None
            return True if last[0] == "Online" else None

        def not_online() -> Exception:
            self.instances.check_alive(env)  # EnvironmentLost if the instance is gone
            return ExecError(f"SSM agent of {env.env_id} not online ({last[0] or 'unregistered'})")

        found = kit.poll(
            online,
            interval_s=self.state_interval_s,
            deadline=clock() + wait_s,
            timeout=not_online,
        )
        env.handle["agent_online"] = True
        env.mark("agent_online")
        return found.resolution_s

    def send(self, env: Environment, command: str, timeout_s: float, t0: float) -> CommandResult:
        """Run `command`; `t0` is when the action began (its latency runs from there)."""
        errors = botocore_errors()
        try:
            sent = self.aws.call(
                self.aws.ssm,
                "send_command",
                waits=env.rate_limit_waits,
                InstanceIds=[env.env_id],
                DocumentName="AWS-RunShellScript",
                Parameters={
                    "commands": [kit.timeout_command(command, timeout_s)],
                    # whole seconds, past ``timeout``'s own kill: never the first to stop it
                    "executionTimeout": [str(math.ceil(timeout_s + kit.KILL_GRACE_S) + 1)],
                    "workingDirectory": [self.workdir],
                },
                Comment=f"rtax {env.run_id}"[:100],
            )
        except errors.ClientError as exc:
            if code(exc) == "InvalidInstanceId":
                self.instances.check_alive(env)  # EnvironmentLost if terminated under us
            raise
        command_id = sent["Command"]["CommandId"]
        backstop_s = kit.call_timeout(timeout_s, self.grace_s)
        last: list[Any] = [None]

        def finished() -> dict[str, Any] | None:
            try:
                inv = self.aws.call(
                    self.aws.ssm,
                    "get_command_invocation",
                    waits=env.rate_limit_waits,
                    CommandId=command_id,
                    InstanceId=env.env_id,
                )
            except errors.ClientError as exc:
                if code(exc) != "InvocationDoesNotExist":  # not yet visible: eventual
                    raise
                inv = {"Status": "Pending"}
            last[0] = inv.get("Status")
            return inv if last[0] in FINAL else None

        def no_result() -> Exception:
            self.cancel(env, command_id)
            self.instances.lost_or_not(env)  # a terminated instance's command never finishes
            return CommandTimeout(
                f"no result {backstop_s:.3g} s after sending (status {last[0]}); cancelled"
            )

        # first check after one interval: a command just sent has not finished
        found = kit.poll(
            finished,
            interval_s=self.interval_s,
            deadline=t0 + backstop_s,
            timeout=no_result,
            pause_first=True,
        )
        return self._result(env, found.value, last[0], clock() - t0, timeout_s, found.resolution_s)

    def _result(
        self,
        env: Environment,
        inv: dict[str, Any],
        status: str,
        latency: float,
        timeout_s: float,
        resolution_s: float,
    ) -> CommandResult:
        """The command's result from its final invocation, or the error it amounts to."""
        details = str(inv.get("StatusDetails") or "")
        if status == "TimedOut":
            if "deliver" in details.lower():
                self.instances.check_alive(env)
                raise ExecError(f"command not delivered to {env.env_id} ({details})")
            self.instances.lost_or_not(env)
            raise CommandTimeout(f"killed after {timeout_s:.3g} s ({details or status})")
        if status == "Cancelled" or details in NOT_RUN:
            self.instances.check_alive(env)
            raise ExecError(f"command {status} ({details})")
        exit_code = int(inv.get("ResponseCode", -1))
        if exit_code < 0:
            raise ExecError(f"command {status} without an exit code ({details})")
        kit.raise_if_timed_out(exit_code, latency, timeout_s)
        stderr = str(inv.get("StandardErrorContent") or "")
        if exit_code != 0:
            stderr = AGENT_SUFFIX.sub("", stderr)
        return CommandResult(
            exit_code,
            str(inv.get("StandardOutputContent") or ""),
            stderr,
            latency,
            resolution_s=resolution_s,
        )

    def cancel(self, env: Environment, command_id: str) -> None:
        """Best effort: the command is already being given up on."""
        with contextlib.suppress(Exception):  # a failed cancel must not hide the timeout
            self.aws.call(
                self.aws.ssm,
                "cancel_command",
                waits=env.rate_limit_waits,
                CommandId=command_id,
                InstanceIds=[env.env_id],
            )
