"""A Daytona control plane, toolbox and notification gateway on loopback, backed by Docker.

Why: the `daytona` substrate must be exercised through the real `daytona` SDK over real HTTP and
a real socket.io connection, but a Daytona account can't be reached from where rtax is tested
(docs/emulations.md). This emulation serves exactly what SDK 0.226 sends:

- **API** (``{base}/api``, ``Authorization: Bearer <key>``): ``POST /sandbox`` (labels,
  snapshot or buildInfo, autoStop/autoDelete intervals), ``GET /sandbox/{idOrName}``,
  ``GET /sandbox?labels=<json>`` (``{items, nextCursor}``), ``DELETE /sandbox/{idOrName}``,
  ``GET /sandbox/{id}/toolbox-proxy-url``; what the SDK's ``create_snapshot``, ``fork``,
  ``pause`` and ``start`` send: ``POST /sandbox/{id}/snapshot`` (a ``docker commit`` of its
  container: files, never memory, ``includeMemory`` refused as for any container sandbox),
  ``POST /sandbox/{id}/fork``, ``POST /sandbox/{id}/pause`` (``docker pause``) and
  ``POST /sandbox/{id}/start`` of a paused sandbox (``docker unpause``), with the states the SDK
  waits for (snapshotting, forking, pausing -> paused, resuming -> started); and of the snapshot
  service, ``GET /snapshots/{idOrName}`` and ``DELETE /snapshots/{id}`` (`snapshots`). Errors
  use the API's JSON envelope (``{statusCode, message, error}``).
- **Notification gateway**: socket.io at ``/api/socket.io/`` (websocket transport), the token in
  the handshake's ``auth``; every connection joins its organization's room, which receives
  ``sandbox.created`` (the sandbox) and ``sandbox.state.updated``
  (``{sandbox, oldState, newState}``) on every transition. The SDK waits on these events, so
  readiness is not quantised to its 1 s safety poll.
- **Toolbox** (``toolboxProxyUrl`` = ``{base}/toolbox``, the SDK appends ``/{sandboxId}``):
  ``POST /process/execute`` as the daemon does it, sessions, and ``GET /system/metrics``
  (the container's memory, from the engine's stats) (`toolbox`).

Every sandbox is a real container of the runner image made by a `DockerSubstrate` named
``daytona-emulation``; states move creating -> started (after the container runs) and
destroying -> destroyed (after it is removed), with an event on each transition. A snapshot is
an image committed from a sandbox's container; every image committed is removed with its
snapshot (or fork) and when the emulation stops.

Faults are planted in ``faults``, the vocabulary every emulation shares
(`rtax.emulation.faults`, which lists this one's operations): any route answered with an HTTP
status (e.g. 403 quota or 429 throttling, for the next N requests) or late, a ``start`` that
fails (the sandbox goes to ``error`` with the message as ``errorReason``) or takes time
(provisioning), and a ``snapshot`` that fails (the snapshot goes to ``error``, its sandbox back
to started) or takes time (committing). `set_error` breaks a running sandbox now. Recorded for
tests: `requests` and `events`.

Not modelled: auto-stop/auto-archive/auto-delete timers (the intervals are stored and returned,
never enforced), stop and archive, quotas and regions (``target`` is echoed), snapshots built
from an image (``POST /snapshots``) and memory snapshots, image builds (a ``buildInfo`` whose
Dockerfile is a bare ``FROM <local image>`` is accepted), file system, git, PTY and preview
APIs, and organizations beyond one.

Where each part lives: `api` (the routes and the error envelope), `sandboxes` (the records, their
states and events, the containers), `snapshots` (the snapshot map and the committed images),
`toolbox` (process execute, sessions, metrics) and `server` (`DaytonaEmulation`: routes, the
socket.io gateway, where faults are matched, start and stop).
"""

from rtax.emulation.daytona.api import (
    BACKGROUND,
    DEFAULT_SNAPSHOTS,
    OPERATIONS,
    ORGANIZATION_ID,
    ROUTES,
)
from rtax.emulation.daytona.server import DaytonaEmulation
from rtax.emulation.daytona.toolbox import parse_command

__all__ = [
    "BACKGROUND",
    "DEFAULT_SNAPSHOTS",
    "OPERATIONS",
    "ORGANIZATION_ID",
    "ROUTES",
    "DaytonaEmulation",
    "parse_command",
]
