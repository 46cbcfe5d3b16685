"""EC2 + SSM on loopback: moto's EC2 state machine, rtax's SSM Run Command, real containers.

Why this shape (README.md#emulations): the `ec2` substrate must be exercised through the real
`boto3` clients over real HTTP, and its T2 workload needs commands that really run (a clone, a
failing test, a patch, a passing test). moto's server models EC2 well but its SSM does not run
commands. So one front server on 127.0.0.1 is the ``endpoint_url`` of both clients, and:

- **EC2** (the Query protocol, ``Action=...`` forms) and anything else it does not handle are
  forwarded unmodified to a real `moto` server on another loopback port: instance state, tags,
  attributes and filters are moto's. moto has no boot time: an instance is ``running`` as soon as
  RunInstances returns, so the emulated orchestration phase is one API round trip.
- **SSM** (JSON 1.1, ``X-Amz-Target: AmazonSSM.*``): ``SendCommand``, ``GetCommandInvocation``,
  ``DescribeInstanceInformation`` and ``CancelCommand`` are rtax's own: ``AWS-RunShellScript``
  commands run in the container that backs the instance, with SSM's states (Pending, InProgress,
  Success, Failed, TimedOut, Cancelled), ``ResponseCode``, stdout and stderr apart and cut to
  SSM's limits (24,000 and 8,000 characters), the agent's ``failed to run commands: exit status
  N`` line on stderr of a failed command, and ``executionTimeout`` enforced by killing the
  command.
- **Backing containers**: every instance that RunInstances launches gets a container of the
  runner image (through `DockerSubstrate`, labelled rtax with this process as owner), created in
  the background; its "SSM agent" is online only once the container runs, so the emulated ready
  phase is the container's start. TerminateInstances removes the container. StopInstances,
  reboots, spot interruptions and instance status checks are not modelled.
- **Faults**, injected from Python: RunInstances refused (`refuse_run_instances`), throttling of
  any EC2 action or SSM target N times or always (`throttle`), invocations that SSM does not
  know yet right after SendCommand (`invocations_not_yet_visible`), instances whose agent never
  comes online (`agent_never_online`).

moto keeps its state per process, so one Ec2Emulation at a time per process; `start` resets it.
Samples taken through this are fidelity ``emulated``: the API is local, the commands run in this
host's Docker engine, and no figure says anything about EC2's own latency.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import re
import shlex
import threading
import uuid
from collections import Counter
from dataclasses import dataclass, field
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs

from rtax.emulation import LoopbackServer
from rtax.image import RUNNER_IMAGE
from rtax.substrates.base import (
    CommandTimeout,
    Environment,
    EnvironmentLost,
    SubstrateError,
    clock,
)
from rtax.substrates.docker import DockerSubstrate
from rtax.substrates.emulated import EMULATION_HEADER

#: SSM's limits on what GetCommandInvocation returns.
STDOUT_LIMIT = 24_000
STDERR_LIMIT = 8_000
#: The fake account moto uses; the instance profile every emulated instance gets.
ACCOUNT = "123456789012"
INSTANCE_PROFILE = "rtax-ssm"
_HOP_BY_HOP = {"connection", "keep-alive", "transfer-encoding", "content-length", "date", "server"}
_INSTANCE_ID = re.compile(r"<instanceId>(i-[0-9a-f]+)</instanceId>")
#: Status and StatusDetails of an invocation the agent never ran ("Undeliverable" is a
#: StatusDetails value only: GetCommandInvocation's Status has no such value).
_UNDELIVERED = ("Failed", "Undeliverable")
_FAKE_KEYS = {"aws_access_key_id": "rtax-emulated", "aws_secret_access_key": "rtax-emulated"}


@dataclass
class Fault:
    """An error answer for one action: `remaining` times (None: always)."""

    status: int
    code: str
    message: str
    remaining: int | None = None


@dataclass
class _Instance:
    instance_id: str
    env: Environment | None = None
    online: bool = False
    never_online: bool = False
    terminated: bool = False
    launched_at: datetime = field(default_factory=lambda: datetime.now(UTC))


@dataclass
class _Invocation:
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

    @property
    def pidfile(self) -> str:
        return f"/tmp/.rtax-ssm-{self.command_id}.pid"


class Ec2Emulation(LoopbackServer):
    """moto's EC2 behind a front server that serves SSM itself, on containers."""

    kind = "ec2"

    def __init__(
        self, port: int | None = None, image: str = RUNNER_IMAGE, region: str = "us-east-1"
    ) -> None:
        self.port = port or 0
        self.image = image
        self.region = region
        self.backing = DockerSubstrate(name="ec2-emulation", image=image)
        self.ami: str | None = None
        #: requests seen, by "ec2:<Action>" or "ssm:<Target>" (faulted ones included)
        self.requests: Counter[str] = Counter()
        self._faults: dict[str, Fault] = {}
        self._never_online = 0
        self._instances: dict[str, _Instance] = {}
        self._invocations: dict[tuple[str, str], _Invocation] = {}
        self._lock = threading.Lock()
        self._threads: list[threading.Thread] = []
        self._moto: Any = None
        self._server: ThreadingHTTPServer | None = None
        self._serve_thread: threading.Thread | None = None
        self._made: set[str] = set()
        self._stopping = False

    # -- life ---------------------------------------------------------------------------------

    def start(self) -> None:
        """Reap orphans of dead emulations, start moto and the front server, seed an AMI and
        the instance profile; return once both serve."""
        from rtax import reaper

        reaper.reap([self.backing])
        self._stopping = False
        self._moto = _moto_server()
        self.moto_port = int(self._moto.server_address[1])
        thread = threading.Thread(target=self._moto.serve_forever, name="moto", daemon=True)
        thread.start()
        self._moto_post("/moto-api/reset")
        self._seed()
        handler = type("_Handler", (_FrontHandler,), {"emulation": self})
        self._server = ThreadingHTTPServer(("127.0.0.1", self.port), handler)
        self._server.daemon_threads = True
        self.port = self._server.server_address[1]
        self._serve_thread = threading.Thread(
            target=self._server.serve_forever, name="ec2-emulation", daemon=True
        )
        self._serve_thread.start()

    def stop(self) -> None:
        """Stop both servers and remove every container this emulation made (idempotent)."""
        self._stopping = True
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
        if self._moto is not None:
            self._moto.shutdown()
            self._moto.server_close()
            self._moto = None
        for thread in list(self._threads):
            thread.join(timeout=120)
        self._threads.clear()
        with self._lock:
            envs = [i.env for i in self._instances.values() if i.env is not None]
            self._instances.clear()
        for env in envs:
            with contextlib.suppress(SubstrateError):
                self.backing.destroy(env, 60)
        for leftover in self.backing.leftovers():  # anything a racing launch made
            if leftover.env_id in self._made:
                self.backing.destroy(leftover, 60)
        self._made.clear()

    def substrate_params(self) -> dict[str, Any]:
        return {
            "endpoint": self.url,
            "region": self.region,
            "ami": self.ami,
            "instance_profile": INSTANCE_PROFILE,
            "host_address": self.backing.host_address,
            "fidelity": "emulated",
        }

    # -- faults -------------------------------------------------------------------------------

    def refuse_run_instances(
        self, code: str = "InsufficientInstanceCapacity", times: int | None = None
    ) -> None:
        """RunInstances answers an error: capacity (HTTP 500) or permission (403)."""
        status = 403 if code.startswith("Unauthorized") else 500
        message = {
            "InsufficientInstanceCapacity": "We currently do not have sufficient capacity in "
            "the Availability Zone you requested.",
            "UnauthorizedOperation": "You are not authorized to perform this operation.",
        }.get(code, code)
        self._faults["ec2:RunInstances"] = Fault(status, code, message, times)

    def throttle(self, action: str, times: int | None = None, service: str = "ec2") -> None:
        """Answer `action` (an EC2 Action or SSM target such as "SendCommand") with throttling,
        `times` times or always: EC2's RequestLimitExceeded (503), SSM's ThrottlingException."""
        if service == "ec2":
            fault = Fault(503, "RequestLimitExceeded", "Request limit exceeded.", times)
        else:
            fault = Fault(400, "ThrottlingException", "Rate exceeded", times)
        self._faults[f"{service}:{action}"] = fault

    def invocations_not_yet_visible(self, times: int) -> None:
        """GetCommandInvocation answers InvocationDoesNotExist `times` times, as real SSM does
        for a short while after SendCommand."""
        self._faults["ssm:GetCommandInvocation"] = Fault(400, "InvocationDoesNotExist", "", times)

    def agent_never_online(self, count: int = 1) -> None:
        """The next `count` instances launched never get an SSM agent online."""
        self._never_online += count

    def clear_faults(self) -> None:
        self._faults.clear()
        self._never_online = 0
        self.requests.clear()

    def _fault(self, key: str) -> Fault | None:
        with self._lock:
            self.requests[key] += 1
            fault = self._faults.get(key)
            if fault is None:
                return None
            if fault.remaining is not None:
                if fault.remaining <= 0:
                    return None
                fault.remaining -= 1
            return fault

    # -- moto ---------------------------------------------------------------------------------

    def _moto_post(self, path: str) -> None:
        conn = http.client.HTTPConnection("127.0.0.1", self.moto_port, timeout=30)
        try:
            conn.request("POST", path, body=b"")
            conn.getresponse().read()
        finally:
            conn.close()

    def _seed(self) -> None:
        """An AMI named after the backing image and the instance profile SSM needs."""
        import boto3

        moto = f"http://127.0.0.1:{self.moto_port}"
        ec2 = boto3.client("ec2", region_name=self.region, endpoint_url=moto, **_FAKE_KEYS)
        self.ami = ec2.register_image(
            Name="rtax-runner-emulated",
            Description=f"emulated: instances are containers of {self.image}",
        )["ImageId"]
        iam = boto3.client("iam", region_name=self.region, endpoint_url=moto, **_FAKE_KEYS)
        iam.create_instance_profile(InstanceProfileName=INSTANCE_PROFILE)

    def forward(
        self, method: str, path: str, headers: dict[str, str], body: bytes
    ) -> tuple[int, list[tuple[str, str]], bytes]:
        """Pass one request to moto unmodified; return its answer."""
        conn = http.client.HTTPConnection("127.0.0.1", self.moto_port, timeout=120)
        try:
            conn.request(method, path, body=body, headers=headers)
            answer = conn.getresponse()
            data = answer.read()
            kept = [(k, v) for k, v in answer.getheaders() if k.lower() not in _HOP_BY_HOP]
            return answer.status, kept, data
        finally:
            conn.close()

    # -- EC2 ----------------------------------------------------------------------------------

    def ec2_request(
        self, method: str, path: str, headers: dict[str, str], body: bytes
    ) -> tuple[int, list[tuple[str, str]], bytes]:
        form = parse_qs(body.decode("utf-8", "replace")) if body else {}
        action = (form.get("Action") or [""])[0]
        fault = self._fault(f"ec2:{action}") if action else None
        if fault is not None:
            xml = (
                '<?xml version="1.0" encoding="UTF-8"?>\n<Response><Errors><Error>'
                f"<Code>{fault.code}</Code><Message>{fault.message}</Message>"
                f"</Error></Errors><RequestID>{uuid.uuid4()}</RequestID></Response>"
            )
            return fault.status, [("Content-Type", "text/xml")], xml.encode()
        status, answer_headers, data = self.forward(method, path, headers, body)
        if status == 200 and action == "RunInstances":
            for instance_id in _INSTANCE_ID.findall(data.decode("utf-8", "replace")):
                self._launch(instance_id)
        elif status == 200 and action == "TerminateInstances":
            for key, values in form.items():
                if key.startswith("InstanceId."):
                    self._terminate(values[0])
        return status, answer_headers, data

    def _launch(self, instance_id: str) -> None:
        with self._lock:
            if instance_id in self._instances:  # a RunInstances repeated with its ClientToken
                return
            never = self._never_online > 0
            if never:
                self._never_online -= 1
            self._instances[instance_id] = _Instance(instance_id, never_online=never)
        self._background(self._boot, instance_id)

    def _boot(self, instance_id: str) -> None:
        """Create and start the backing container; the agent is online once it runs. If the
        container can't be made, the agent simply never comes online (as on a broken AMI)."""
        try:
            env = self.backing.create(instance_id)
        except SubstrateError:
            return
        self._made.add(env.env_id)
        try:
            self.backing.wait_running(env, 120)
        except SubstrateError:
            with contextlib.suppress(SubstrateError):
                self.backing.destroy(env, 60)
            return
        with self._lock:
            instance = self._instances.get(instance_id)
            gone = instance is None or instance.terminated or self._stopping
            if not gone:
                instance.env = env
                instance.online = not instance.never_online
        if gone:
            self.backing.destroy(env, 60)

    def _terminate(self, instance_id: str) -> None:
        with self._lock:
            instance = self._instances.get(instance_id)
            if instance is None or instance.terminated:
                return
            instance.terminated, instance.online = True, False
            env, instance.env = instance.env, None
        if env is not None:
            self._background(self.backing.destroy, env, 60)

    def _background(self, fn: Any, *args: Any) -> None:
        thread = threading.Thread(target=fn, args=args, daemon=True)
        with self._lock:
            self._threads = [t for t in self._threads if t.is_alive()]
            self._threads.append(thread)
        thread.start()

    # -- SSM ----------------------------------------------------------------------------------

    def timings(self, instance_id: str) -> list[dict[str, float | None]]:
        """Per command sent to `instance_id`, in order, on this process's `clock`: when the
        service accepted it, when it ended, and when a GetCommandInvocation first reported
        the outcome. The service's own view, against which tests check rtax's polled figures
        (README.md#resolution)."""
        with self._lock:
            return [
                {"accepted": inv.accepted_t, "ended": inv.ended_t, "reported": inv.reported_t}
                for (_, iid), inv in self._invocations.items()
                if iid == instance_id
            ]

    def ssm_request(self, target: str, body: bytes) -> tuple[int, dict[str, Any]]:
        fault = self._fault(f"ssm:{target}")
        if fault is not None:
            return fault.status, {"__type": fault.code, "message": fault.message}
        try:
            request = json.loads(body or b"{}")
        except ValueError:
            return 400, {"__type": "SerializationException", "message": "bad JSON"}
        handler = {
            "SendCommand": self._send_command,
            "GetCommandInvocation": self._get_invocation,
            "DescribeInstanceInformation": self._describe_information,
            "CancelCommand": self._cancel_command,
        }.get(target)
        if handler is None:
            return 400, {
                "__type": "UnknownOperationException",
                "message": f"the EC2 emulation does not serve SSM {target}",
            }
        try:
            return 200, handler(request)
        except _SsmError as exc:
            return 400, {"__type": exc.code, "message": str(exc)}

    def _send_command(self, request: dict[str, Any]) -> dict[str, Any]:
        document = request.get("DocumentName")
        if document != "AWS-RunShellScript":
            raise _SsmError("InvalidDocument", f"document {document} is not emulated")
        ids = list(request.get("InstanceIds") or [])
        with self._lock:
            offline = [i for i in ids if not (i in self._instances and self._instances[i].online)]
        if not ids or offline:
            raise _SsmError(
                "InvalidInstanceId",
                f"Instances {offline or ids} not in a valid state for account {ACCOUNT}",
            )
        params = request.get("Parameters") or {}
        script = "\n".join(params.get("commands") or [])
        timeout = int((params.get("executionTimeout") or ["3600"])[0])
        workdir = (params.get("workingDirectory") or [""])[0]
        command_id = str(uuid.uuid4())
        for instance_id in ids:
            inv = _Invocation(
                command_id, instance_id, request.get("Comment", ""), script, timeout, workdir
            )
            with self._lock:
                self._invocations[(command_id, instance_id)] = inv
            self._background(self._execute, inv)
        return {
            "Command": {
                "CommandId": command_id,
                "DocumentName": document,
                "Comment": request.get("Comment", ""),
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

    def _execute(self, inv: _Invocation) -> None:
        """Run one invocation in the instance's container, with SSM's outcome rules."""
        with self._lock:
            instance = self._instances.get(inv.instance_id)
            env = instance.env if instance else None
            if inv.cancelled or env is None:
                inv.status, inv.details = ("Cancelled",) * 2 if inv.cancelled else _UNDELIVERED
                inv.ended = datetime.now(UTC)
                return
            inv.status, inv.details = "InProgress", "InProgress"
            inv.started = datetime.now(UTC)
        cd = f"cd {shlex.quote(inv.workdir)} || exit 1\n" if inv.workdir else ""
        script = f"echo $$ > {inv.pidfile}\n{cd}{inv.script}"
        try:
            result = self.backing.run(env, script, float(inv.timeout_s))
        except CommandTimeout:
            self._finish(inv, "TimedOut", "ExecutionTimedOut", 124, "", "")
            return
        except EnvironmentLost:
            self._finish(inv, *_UNDELIVERED, -1, "", "")
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
        self, inv: _Invocation, status: str, details: str, code: int, out: str, err: str
    ) -> None:
        with self._lock:
            inv.code, inv.stdout, inv.stderr = code, out[:STDOUT_LIMIT], err[:STDERR_LIMIT]
            inv.ended = datetime.now(UTC)
            inv.ended_t = clock()
            inv.status, inv.details = status, details

    def _get_invocation(self, request: dict[str, Any]) -> dict[str, Any]:
        key = (request.get("CommandId", ""), request.get("InstanceId", ""))
        with self._lock:
            inv = self._invocations.get(key)
            if inv is None:
                raise _SsmError("InvocationDoesNotExist", "")
            final = inv.ended is not None
            if final and inv.reported_t is None:
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
        with self._lock:
            online = [
                i
                for i in self._instances.values()
                if i.online and (wanted is None or i.instance_id in wanted)
            ]
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
        with self._lock:
            found = [
                inv
                for (cid, iid), inv in self._invocations.items()
                if cid == command_id and (not ids or iid in ids)
            ]
            for inv in found:
                inv.cancelled = True
        if not found:
            raise _SsmError("InvalidCommandId", f"command {command_id} not found")
        for inv in found:
            if inv.status == "InProgress":
                self._background(self._kill, inv)
        return {}

    def _kill(self, inv: _Invocation) -> None:
        """Kill the invocation's process group (coreutils `timeout` leads it)."""
        with self._lock:
            instance = self._instances.get(inv.instance_id)
            env = instance.env if instance else None
        if env is None:
            return
        pgid = f"$(cut -d' ' -f5 /proc/$(cat {inv.pidfile})/stat)"
        with contextlib.suppress(SubstrateError):
            self.backing.run(env, f"kill -KILL -{pgid} 2>/dev/null; true", 30)


def _moto_server() -> Any:
    """moto's own server app (as ``moto_server`` runs it) on an ephemeral loopback port, with
    its request log silenced: one line per API call would flood the probe's output."""
    from moto.moto_server.werkzeug_app import (
        DomainDispatcherApplication,
        MotoRequestHandler,
        create_backend_app,
    )
    from werkzeug.serving import make_server

    class Quiet(MotoRequestHandler):
        def log_request(self, *args: Any, **kwargs: Any) -> None:
            pass

    app = DomainDispatcherApplication(create_backend_app)
    return make_server("127.0.0.1", 0, app, threaded=True, request_handler=Quiet)


class _SsmError(Exception):
    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code


class _FrontHandler(BaseHTTPRequestHandler):
    """SSM JSON targets are served here; everything else goes to moto unmodified."""

    emulation: Ec2Emulation
    protocol_version = "HTTP/1.1"

    def _handle(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else b""
        target = self.headers.get("X-Amz-Target") or ""
        if target.startswith("AmazonSSM."):
            status, payload = self.emulation.ssm_request(target.partition(".")[2], body)
            data = json.dumps(payload).encode()
            headers = [
                ("Content-Type", "application/x-amz-json-1.1"),
                ("x-amzn-RequestId", str(uuid.uuid4())),
            ]
        else:
            status, headers, data = self.emulation.ec2_request(
                self.command, self.path, dict(self.headers.items()), body
            )
        self.send_response(status)
        for key, value in headers:
            self.send_header(key, value)
        self.send_header(EMULATION_HEADER, self.emulation.kind)  # moto's answers included
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(data)

    do_GET = do_POST = do_PUT = do_DELETE = do_HEAD = _handle

    def log_message(self, format: str, *args: Any) -> None:
        """Quiet: request lines would flood the probe's output."""
