"""moto's server on loopback: the EC2 object store (instances, tags, attributes, filters).

Why (docs/emulations.md): moto models EC2's state machine well, so the emulation does not: every
EC2 request is forwarded to a real moto server unmodified and its answer passed back. moto has
no boot time: an instance is ``running`` as soon as RunInstances returns, so the emulated
orchestration phase is one API round trip. moto keeps its state per process, so one EC2
emulation at a time per process; `start` resets it.
"""

from __future__ import annotations

import http.client
from typing import Any

from rtax.emulation.ec2.api import INSTANCE_PROFILE

_HOP_BY_HOP = {"connection", "keep-alive", "transfer-encoding", "content-length", "date", "server"}
_FAKE_KEYS = {"aws_access_key_id": "rtax-emulated", "aws_secret_access_key": "rtax-emulated"}


class Moto:
    """One moto server on an ephemeral loopback port, reset and seeded when started."""

    def __init__(self) -> None:
        self.port = 0
        self._server: Any = None

    def start(self, region: str, image: str) -> str:
        """Serve from a fresh state with an AMI named after `image` and the instance profile
        SSM needs; return the AMI's id."""
        import threading

        self._server = _moto_server()
        self.port = int(self._server.server_address[1])
        thread = threading.Thread(target=self._server.serve_forever, name="moto", daemon=True)
        thread.start()
        self._post("/moto-api/reset")
        return self._seed(region, image)

    def stop(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None

    def forward(
        self, method: str, path: str, headers: dict[str, str], body: bytes
    ) -> tuple[int, list[tuple[str, str]], bytes]:
        """Pass one request to moto unmodified; return its answer."""
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=120)
        try:
            conn.request(method, path, body=body, headers=headers)
            answer = conn.getresponse()
            data = answer.read()
            kept = [(k, v) for k, v in answer.getheaders() if k.lower() not in _HOP_BY_HOP]
            return answer.status, kept, data
        finally:
            conn.close()

    def _post(self, path: str) -> None:
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=30)
        try:
            conn.request("POST", path, body=b"")
            conn.getresponse().read()
        finally:
            conn.close()

    def _seed(self, region: str, image: str) -> str:
        import boto3

        moto = f"http://127.0.0.1:{self.port}"
        ec2 = boto3.client("ec2", region_name=region, endpoint_url=moto, **_FAKE_KEYS)
        ami = ec2.register_image(
            Name="rtax-runner-emulated",
            Description=f"emulated: instances are containers of {image}",
        )["ImageId"]
        iam = boto3.client("iam", region_name=region, endpoint_url=moto, **_FAKE_KEYS)
        iam.create_instance_profile(InstanceProfileName=INSTANCE_PROFILE)
        return ami


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
