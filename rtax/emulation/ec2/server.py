"""`Ec2Emulation`: the front server both clients talk to, where faults are matched; start, stop.

Why (docs/emulations.md): one server on 127.0.0.1 is the ``endpoint_url`` of both boto3
clients. It serves SSM targets itself (`ssm`), forwards every other request unmodified to moto
(`moto`), watches RunInstances and TerminateInstances go by to make and remove the instances'
containers (`instances`), and answers the faults a test plants in ``faults``
(`rtax.emulation.faults`) in the services' own error formats (`api`).
"""

from __future__ import annotations

import json
import re
import threading
import uuid
from collections import Counter
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs

from rtax.assets.image import RUNNER_IMAGE
from rtax.emulation import LoopbackServer
from rtax.emulation.ec2.api import (
    BACKGROUND,
    CODES,
    INSTANCE_PROFILE,
    OPERATIONS,
    ec2_error,
    ssm_error,
)
from rtax.emulation.ec2.instances import Fleet
from rtax.emulation.ec2.moto import Moto
from rtax.emulation.ec2.ssm import RunCommand
from rtax.emulation.faults import Faults
from rtax.substrates.emulated import EMULATION_HEADER

_INSTANCE_ID = re.compile(r"<instanceId>(i-[0-9a-f]+)</instanceId>")
_SSM_JSON = "application/x-amz-json-1.1"

Answer = tuple[int, list[tuple[str, str]], bytes]


class Ec2Emulation(LoopbackServer):
    """moto's EC2 behind a front server that serves SSM itself, on containers."""

    kind = "ec2"

    def __init__(
        self, port: int | None = None, image: str = RUNNER_IMAGE, region: str = "us-east-1"
    ) -> None:
        self.port = port or 0
        self.image = image
        self.region = region
        #: what the services do next instead of their normal course (`rtax.emulation.faults`)
        self.faults = Faults(OPERATIONS, BACKGROUND, CODES)
        self.fleet = Fleet(image, self.faults)
        self.backing = self.fleet.backing
        self.ssm = RunCommand(self.fleet)
        self.moto = Moto()
        self.ami: str | None = None
        #: requests seen, by "ec2:<Action>" or "ssm:<Target>" (faulted ones included)
        self.requests: Counter[str] = Counter()
        self._requests_lock = threading.Lock()
        #: RunInstances answers by ClientToken: a repeated launch answers the first one
        self._launches: dict[str, Answer] = {}
        self._server: ThreadingHTTPServer | None = None
        self._serve_thread: threading.Thread | None = None

    # -- life ---------------------------------------------------------------------------------

    def start(self) -> None:
        """Reap orphans of dead emulations, start moto and the front server, seed an AMI and
        the instance profile; return once both serve."""
        self.fleet.start()
        self.faults.open()
        self.ami = self.moto.start(self.region, self.image)
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
        self.faults.close()
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None
        self.moto.stop()
        self.fleet.stop()

    def substrate_params(self) -> dict[str, Any]:
        return {
            "endpoint": self.url,
            "region": self.region,
            "ami": self.ami,
            "instance_profile": INSTANCE_PROFILE,
            "host_address": self.backing.host_address,
            "fidelity": "emulated",
        }

    def timings(self, instance_id: str) -> list[dict[str, float | None]]:
        """Per command sent to `instance_id`, in order, on this process's `clock`: when the
        service accepted it, when it ended, when a GetCommandInvocation first reported the
        outcome, and when the last one before it answered "not yet". The service's own view,
        against which tests check rtax's polled figures (docs/measurement.md#resolution)."""
        return self.ssm.timings(instance_id)

    # -- one request ----------------------------------------------------------------------------

    def answer(self, method: str, path: str, headers: dict[str, str], body: bytes) -> Answer:
        """One request, the one place faults are matched: an SSM target (``X-Amz-Target:
        AmazonSSM.<Target>``) is served here, anything else is an EC2 action for moto."""
        target = next((v for k, v in headers.items() if k.lower() == "x-amz-target"), "")
        service, operation, form = "ssm", target.partition(".")[2], {}
        if not target.startswith("AmazonSSM."):
            form = parse_qs(body.decode("utf-8", "replace")) if body else {}
            service, operation = "ec2", (form.get("Action") or [""])[0]
        if operation or service == "ssm":
            with self._requests_lock:
                self.requests[f"{service}:{operation}"] += 1
        fault = self.faults.take(operation) if operation else None
        if fault is None or not fault.refuses:
            if service == "ssm":
                result = _ssm(*self.ssm.request(operation, body))
            else:
                result = self._ec2(method, path, headers, body, form, operation)
        if fault is not None:
            self.faults.wait(fault.delay_s)  # refused, or done, answered late
        if fault is None or not fault.failing:
            return result
        assert fault.status is not None
        if service == "ssm":
            code = fault.code or "InternalServerError"
            status, kept, data = _ssm(fault.status, ssm_error(code, fault.message))
        else:
            code = fault.code or "InternalError"
            kept = [("Content-Type", "text/xml")]
            status, data = fault.status, ec2_error(code, fault.message)
        return status, kept + list(fault.headers.items()), data

    def _ec2(
        self,
        method: str,
        path: str,
        headers: dict[str, str],
        body: bytes,
        form: dict[str, list[str]],
        action: str,
    ) -> Answer:
        """Forward to moto; make or remove the containers of the instances it launched or
        terminated."""
        token = (form.get("ClientToken") or [""])[0] if action == "RunInstances" else ""
        with self._requests_lock:
            launched = self._launches.get(token) if token else None
        if launched is not None:  # EC2's idempotency: the same ClientToken, the same launch
            return launched
        status, answer_headers, data = self.moto.forward(method, path, headers, body)
        if status == 200 and token:
            with self._requests_lock:
                self._launches[token] = (status, answer_headers, data)
        if status == 200 and action == "RunInstances":
            for instance_id in _INSTANCE_ID.findall(data.decode("utf-8", "replace")):
                self.fleet.launch(instance_id)
        elif status == 200 and action == "TerminateInstances":
            for key, values in form.items():
                if key.startswith("InstanceId."):
                    self.fleet.terminate(values[0])
        return status, answer_headers, data


def _ssm(status: int, payload: dict[str, Any]) -> Answer:
    headers = [("Content-Type", _SSM_JSON), ("x-amzn-RequestId", str(uuid.uuid4()))]
    return status, headers, json.dumps(payload).encode()


class _FrontHandler(BaseHTTPRequestHandler):
    """Every request goes to `Ec2Emulation.answer`; every answer says it is emulated."""

    emulation: Ec2Emulation
    protocol_version = "HTTP/1.1"

    def _handle(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else b""
        status, headers, data = self.emulation.answer(
            self.command, self.path, dict(self.headers.items()), body
        )
        try:
            self.send_response(status)
            for key, value in headers:
                self.send_header(key, value)
            self.send_header(EMULATION_HEADER, self.emulation.kind)  # moto's answers included
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(data)
        except (BrokenPipeError, ConnectionResetError):
            # The client stopped waiting (a delayed answer past its timeout, the lost-response
            # fault): what a real service sees as a closed connection, not an error of its own.
            self.close_connection = True

    do_GET = do_POST = do_PUT = do_DELETE = do_HEAD = _handle

    def log_message(self, format: str, *args: Any) -> None:
        """Quiet: request lines would flood the probe's output."""
