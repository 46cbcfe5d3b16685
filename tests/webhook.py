"""A webhook receiver for tests: a real HTTP server on 127.0.0.1 that keeps what it is posted
(tests/test_alerts.py, tests/test_live_monitor.py)."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


class Receiver:
    """An HTTP server in a thread that records every JSON body it is posted; `status` is what
    it answers, and `hold` (when set) makes it wait before answering."""

    def __init__(self, port: int = 0) -> None:
        self.bodies: list[dict[str, Any]] = []
        self.requests = 0
        self.status = 200
        self.hold: threading.Event | None = None
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                receiver.requests += 1
                data = self.rfile.read(int(self.headers["Content-Length"]))
                if receiver.hold is not None:
                    # A hang of at most 10 s, not a wait on the test: below the alert timeouts
                    # the tests give (20 s in tests/test_scheduler.py), so that a held post is
                    # answered late, never timed out and sent again.
                    receiver.hold.wait(10)
                if receiver.status == 200:
                    receiver.bodies.append(json.loads(data))
                self.send_response(receiver.status)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hook"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        if self.hold is not None:
            self.hold.set()
        self.server.shutdown()
        self.server.server_close()
