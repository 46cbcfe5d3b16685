"""What the Daytona API says, apart from any state: its operations and its error envelope.

Why: the rules a reader checks against Daytona's (the JSON error envelope ``{statusCode,
message, error}`` every route answers with, the organization every sandbox belongs to, the
snapshot map) in one place; `sandboxes`, `toolbox` and `server` use them.
"""

from __future__ import annotations

from rtax.assets.image import RUNNER_IMAGE

#: The organization every emulated sandbox belongs to (the socket.io room events go to).
ORGANIZATION_ID = "rtax-emulated-organization"
#: Snapshot name -> local image, the default map (the substrate's default snapshot).
DEFAULT_SNAPSHOTS = {"rtax-runner": RUNNER_IMAGE}

_BOX = "/toolbox/{sid}/process"
#: Operation -> (method, path) of its route: the operations a fault can be planted on
#: (`rtax.emulation.faults`) are the routes. The SDK appends ``/{sandboxId}`` to the
#: ``toolboxProxyUrl`` (``{base}/toolbox``).
ROUTES = {
    "create": ("POST", "/api/sandbox"),
    "list": ("GET", "/api/sandbox"),
    "get": ("GET", "/api/sandbox/{ref}"),
    "delete": ("DELETE", "/api/sandbox/{ref}"),
    "toolbox_url": ("GET", "/api/sandbox/{ref}/toolbox-proxy-url"),
    "sandbox_snapshot": ("POST", "/api/sandbox/{ref}/snapshot"),
    "fork": ("POST", "/api/sandbox/{ref}/fork"),
    "pause": ("POST", "/api/sandbox/{ref}/pause"),
    "start_sandbox": ("POST", "/api/sandbox/{ref}/start"),
    "snapshot_get": ("GET", "/api/snapshots/{ref}"),
    "snapshot_delete": ("DELETE", "/api/snapshots/{ref}"),
    "metrics": ("GET", "/toolbox/{sid}/system/metrics"),
    "execute": ("POST", f"{_BOX}/execute"),
    "session_create": ("POST", f"{_BOX}/session"),
    "session_list": ("GET", f"{_BOX}/session"),
    "session_get": ("GET", f"{_BOX}/session/{{session}}"),
    "session_delete": ("DELETE", f"{_BOX}/session/{{session}}"),
    "session_exec": ("POST", f"{_BOX}/session/{{session}}/exec"),
    "command_get": ("GET", f"{_BOX}/session/{{session}}/command/{{cmd}}"),
    "command_logs": ("GET", f"{_BOX}/session/{{session}}/command/{{cmd}}/logs"),
}
OPERATIONS = {op: f"{method} {path}" for op, (method, path) in ROUTES.items()}
BACKGROUND = {
    "start": "a created sandbox provisioning and starting",
    "snapshot": "a sandbox's container being committed into a snapshot",
}

REASONS = {400: "Bad Request", 401: "Unauthorized", 403: "Forbidden", 404: "Not Found",
           408: "Request Timeout", 409: "Conflict", 429: "Too Many Requests",
           500: "Internal Server Error", 503: "Service Unavailable"}  # fmt: skip


class HttpError(Exception):
    """An error answer in the API's envelope: `status`, `message`, and ``error`` (`code`, else
    the status's reason phrase)."""

    def __init__(
        self,
        status: int,
        message: str,
        code: str | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.code = code
        self.headers = headers or {}

    def envelope(self) -> dict[str, object]:
        error = self.code or REASONS.get(self.status, "Error")
        return {"statusCode": self.status, "message": self.message, "error": error}
