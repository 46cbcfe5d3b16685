"""SSM Run Command, served by rtax itself, on the instances' containers.

Why (docs/emulations.md): moto's SSM does not run commands, and the T2 workload needs
commands that really run. ``SendCommand``, ``GetCommandInvocation``,
``DescribeInstanceInformation`` and ``CancelCommand`` (JSON 1.1, ``X-Amz-Target:
AmazonSSM.*``): ``AWS-RunShellScript`` commands run in the container that backs the instance,
with SSM's states (Pending, InProgress, Success, Failed, TimedOut, Cancelled), ``ResponseCode``,
stdout and stderr apart and cut to SSM's limits, the agent's ``failed to run commands: exit
status N`` line on stderr of a failed command, and ``executionTimeout`` enforced by killing the
command. Each invocation also keeps, on this process's `clock`, when it was accepted, ended and
first reported: the service's own view, against which tests check rtax's polled figures
(docs/measurement.md#resolution).
"""

from __future__ import annotations

import contextlib
import json
import shlex
import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from rtax.core.failures import CommandTimeout, EnvironmentLost, SubstrateError
from rtax.emulation.ec2.api import (
    ACCOUNT,
    INSTANCE_PROFILE,
    STDERR_LIMIT,
    STDOUT_LIMIT,
    UNDELIVERED,
    SsmError,
    ssm_error,
)
from rtax.emulation.ec2.instances import Fleet
from rtax.substrates.base import clock


@dataclass
class Invocation:
    command_id: str
    instance_id: str
    comment: str
    script: str
    timeout_s: int
    workdir: str
    status: str = "Pending"
    details: str = "Pending"
    code: int = -1
    stdout: str = ""
    stderr: str = ""
    started: datetime | None = None
    ended: datetime | None = None
    cancelled: bool = False
    #: On this process's `clock` (tests compare them with rtax's own timing): when the
    #: emulated service accepted the SendCommand, and when the invocation reached its outcome.
    accepted_t: float = field(default_factory=clock)
    ended_t: float | None = None
    #: when a GetCommandInvocation first answered with the outcome
    reported_t: float | None = None
    #: when the last GetCommandInvocation before that answered "not yet" (None: none did)
    asked_t: float | None = None

    @property
    def pidfile(self) -> str:
        return f"/tmp/.rtax-ssm-{self.command_id}.pid"


class RunCommand:
    """SSM's Run Command on the instances of `fleet`."""

    def __init__(self, fleet: Fleet) -> None:
        self.fleet = fleet
        self._invocations: dict[tuple[str, str], Invocation] = {}

    def request(self, target: str, body: bytes) -> tuple[int, dict[str, Any]]:
        """Answer one SSM request: (HTTP status, JSON body)."""
        try:
            request = json.loads(body or b"{}")
        except ValueError:
            return 400, ssm_error("SerializationException", "bad JSON")
        handler = {
            "SendCommand": self._send_command,
            "GetCommandInvocation": self._get_invocation,
            "DescribeInstanceInformation": self._describe_information,
            "CancelCommand": self._cancel_command,
        }.get(target)
        if handler is None:
            message = f"the EC2 emulation does not serve SSM {target}"
            return 400, ssm_error("UnknownOperationException", message)
        try:
            return 200, handler(request)
        except SsmError as exc:
            return 400, ssm_error(exc.code, str(exc))

    def timings(self, instance_id: str) -> list[dict[str, float | None]]:
        """Per command sent to `instance_id`, in order: when the service accepted it, when it
        ended, when a GetCommandInvocation first reported the outcome, and when the last one
        before that answered "not yet"."""
        with self.fleet.lock:
            return [
                {
                    "accepted": inv.accepted_t,
                    "ended": inv.ended_t,
                    "reported": inv.reported_t,
                    "asked": inv.asked_t,
                }
                for (_, iid), inv in self._invocations.items()
                if iid == instance_id
            ]

    def _send_command(self, request: dict[str, Any]) -> dict[str, Any]:
        document = request.get("DocumentName")
        if document != "AWS-RunShellScript":
            raise SsmError("InvalidDocument", f"document {document} is not emulated")
        ids = list(request.get("InstanceIds") or [])
        with self.fleet.lock:
            online = {i.instance_id for i in self.fleet.online(set(ids))}
        offline = [i for i in ids if i not in online]
        if not ids or offline:
            raise SsmError(
                "InvalidInstanceId",
                f"Instances {offline or ids} not in a valid state for account {ACCOUNT}",
            )
        params = request.get("Parameters") or {}
        script = "\n".join(params.get("commands") or [])
        timeout = int((params.get("executionTimeout") or ["3600"])[0])
        workdir = (params.get("workingDirectory") or [""])[0]
        command_id = str(uuid.uuid4())
        comment = request.get("Comment", "")
        for instance_id in ids:
            inv = Invocation(command_id, instance_id, comment, script, timeout, workdir)
            with self.fleet.lock:
                self._invocations[(command_id, instance_id)] = inv
            self.fleet.background(self._execute, inv)
        return {
            "Command": {
                "CommandId": command_id,
                "DocumentName": document,
                "Comment": comment,
                "Parameters": params,
                "InstanceIds": ids,
                "RequestedDateTime": datetime.now(UTC).timestamp(),
                "Status": "Pending",
                "StatusDetails": "Pending",
                "TargetCount": len(ids),
                "CompletedCount": 0,
                "ErrorCount": 0,
                "TimeoutSeconds": request.get("TimeoutSeconds", 3600),
            }
        }

    def _execute(self, inv: Invocation) -> None:
        """Run one invocation in the instance's container, with SSM's outcome rules."""
        with self.fleet.lock:
            env = self.fleet.env_of(inv.instance_id)
            if inv.cancelled or env is None:
                inv.status, inv.details = ("Cancelled",) * 2 if inv.cancelled else UNDELIVERED
                inv.ended = datetime.now(UTC)
                return
            inv.status, inv.details = "InProgress", "InProgress"
            inv.started = datetime.now(UTC)
        cd = f"cd {shlex.quote(inv.workdir)} || exit 1\n" if inv.workdir else ""
        script = f"echo $$ > {inv.pidfile}\n{cd}{inv.script}"
        try:
            result = self.fleet.backing.run(env, script, float(inv.timeout_s))
        except CommandTimeout:
            self._finish(inv, "TimedOut", "ExecutionTimedOut", 124, "", "")
            return
        except EnvironmentLost:
            self._finish(inv, *UNDELIVERED, -1, "", "")
            return
        except SubstrateError as exc:
            self._finish(inv, "Failed", "Failed", -1, "", str(exc))
            return
        if inv.cancelled:
            self._finish(inv, "Cancelled", "Cancelled", -1, "", "")
        elif result.exit_code == 0:
            self._finish(inv, "Success", "Success", 0, result.stdout, result.stderr)
        else:
            # what the agent does: it marks the plugin failed with one more line on stderr
            stderr = result.stderr
            if stderr and not stderr.endswith("\n"):
                stderr += "\n"
            stderr += f"failed to run commands: exit status {result.exit_code}"
            self._finish(inv, "Failed", "Failed", result.exit_code, result.stdout, stderr)

    def _finish(
        self, inv: Invocation, status: str, details: str, code: int, out: str, err: str
    ) -> None:
        with self.fleet.lock:
            inv.code, inv.stdout, inv.stderr = code, out[:STDOUT_LIMIT], err[:STDERR_LIMIT]
            inv.ended = datetime.now(UTC)
            inv.ended_t = clock()
            inv.status, inv.details = status, details

    def _get_invocation(self, request: dict[str, Any]) -> dict[str, Any]:
        key = (request.get("CommandId", ""), request.get("InstanceId", ""))
        with self.fleet.lock:
            inv = self._invocations.get(key)
            if inv is None:
                raise SsmError("InvocationDoesNotExist", "")
            final = inv.ended is not None
            if not final:
                inv.asked_t = clock()
            elif inv.reported_t is None:
                inv.reported_t = clock()
            started = inv.started.isoformat() if inv.started else ""
            ended = inv.ended.isoformat() if inv.ended else ""
            elapsed = ""
            if inv.started and inv.ended:
                elapsed = f"PT{(inv.ended - inv.started).total_seconds():.3f}S"
            return {
                "CommandId": inv.command_id,
                "InstanceId": inv.instance_id,
                "Comment": inv.comment,
                "DocumentName": "AWS-RunShellScript",
                "DocumentVersion": "$DEFAULT",
                "PluginName": "aws:runShellScript",
                "ResponseCode": inv.code,
                "ExecutionStartDateTime": started,
                "ExecutionElapsedTime": elapsed,
                "ExecutionEndDateTime": ended,
                "Status": inv.status,
                "StatusDetails": inv.details,
                "StandardOutputContent": inv.stdout if final else "",
                "StandardOutputUrl": "",
                "StandardErrorContent": inv.stderr if final else "",
                "StandardErrorUrl": "",
                "CloudWatchOutputConfig": {
                    "CloudWatchLogGroupName": "",
                    "CloudWatchOutputEnabled": False,
                },
            }

    def _describe_information(self, request: dict[str, Any]) -> dict[str, Any]:
        wanted: set[str] | None = None
        for f in request.get("Filters") or []:
            if f.get("Key") == "InstanceIds":
                wanted = set(f.get("Values") or [])
        for f in request.get("InstanceInformationFilterList") or []:
            if f.get("key") == "InstanceIds":
                wanted = set(f.get("valueSet") or [])
        with self.fleet.lock:
            online = self.fleet.online(wanted)
        now = datetime.now(UTC).timestamp()
        return {
            "InstanceInformationList": [
                {
                    "InstanceId": i.instance_id,
                    "PingStatus": "Online",
                    "LastPingDateTime": now,
                    "AgentVersion": "emulated",
                    "IsLatestVersion": True,
                    "PlatformType": "Linux",
                    "PlatformName": "rtax-runner",
                    "ResourceType": "EC2Instance",
                    "IamRole": INSTANCE_PROFILE,
                    "RegistrationDate": i.launched_at.timestamp(),
                    "ComputerName": i.instance_id,
                }
                for i in online
            ]
        }

    def _cancel_command(self, request: dict[str, Any]) -> dict[str, Any]:
        command_id = request.get("CommandId", "")
        ids = set(request.get("InstanceIds") or [])
        with self.fleet.lock:
            found = [
                inv
                for (cid, iid), inv in self._invocations.items()
                if cid == command_id and (not ids or iid in ids)
            ]
            for inv in found:
                inv.cancelled = True
        if not found:
            raise SsmError("InvalidCommandId", f"command {command_id} not found")
        for inv in found:
            if inv.status == "InProgress":
                self.fleet.background(self._kill, inv)
        return {}

    def _kill(self, inv: Invocation) -> None:
        """Kill the invocation's process group (coreutils `timeout` leads it)."""
        with self.fleet.lock:
            env = self.fleet.env_of(inv.instance_id)
        if env is None:
            return
        pgid = f"$(cut -d' ' -f5 /proc/$(cat {inv.pidfile})/stat)"
        with contextlib.suppress(SubstrateError):
            self.fleet.backing.run(env, f"kill -KILL -{pgid} 2>/dev/null; true", 30)
