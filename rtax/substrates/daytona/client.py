"""The `daytona` SDK client, shared per endpoint, and how its errors read.

Why shared: the scheduler makes a substrate per rollout, and a client per rollout would put the
SDK's construction inside the timed create and open one more socket.io connection (the event
stream that ends the start wait) each time. So every substrate of the same endpoint, target and
key in this process uses one client, counted: the last `release` closes its event connection,
which would otherwise reconnect forever. A substrate dropped without `close` keeps its count,
and the client then lives as long as the process (what keeps a monitor's creates cheap).

Why the emulation watch lives here too: it watches the client's responses, so whether an
emulation answered is a fact about the client, shared by all its users.
"""

from __future__ import annotations

import contextlib
import json
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from rtax.core.provenance import library_versions
from rtax.substrates import kit
from rtax.substrates.emulated import EmulationWatch

#: States in which a sandbox can no longer run commands.
DEAD_STATES = ("error", "build_failed", "destroyed", "destroying", "stopped", "stopping",
               "archived", "archiving")  # fmt: skip
#: The distributions whose versions are the client's provenance.
DISTRIBUTIONS = ("daytona", "daytona_api_client", "daytona_toolbox_api_client")


@dataclass
class Shared:
    """One SDK client, the watch on its responses, and how many substrates use it."""

    sdk: Any
    watch: EmulationWatch
    users: int = 0


#: (api_url, target, key) -> the client those substrates share
_SHARED: dict[tuple[str, str | None, str], Shared] = {}
_LOCK = threading.Lock()


def acquire(api_url: str, target: str | None, key: str) -> Shared:
    """The shared client of this endpoint, target and key (made on first use), counted once
    more. Its event connection is (re)started here, before any create, so that a start event
    can't be missed while it connects."""
    from daytona import Daytona, DaytonaConfig

    ident = (api_url, target, key)
    with _LOCK:
        shared = _SHARED.get(ident)
        if shared is None:
            sdk = Daytona(DaytonaConfig(api_key=key, api_url=api_url, target=target))
            shared = _SHARED[ident] = Shared(sdk, EmulationWatch())
            shared.watch.watch_openapi(sdk._api_client)  # API calls
            shared.watch.watch_openapi(sdk._toolbox_api_client)  # commands in a sandbox
        shared.users += 1
    connect(shared.sdk)
    return shared


def connect(sdk: Any) -> None:
    """Make sure the SDK's event connection is up (non-blocking; after an idle disconnect, it
    reconnects)."""
    dispatcher = getattr(sdk, "_event_dispatcher", None)
    if dispatcher is not None:
        dispatcher.ensure_connected()


def release(shared: Shared) -> None:
    """Count one user less; the last one closes the SDK's event connection."""
    with _LOCK:
        shared.users -= 1
        last = shared.users <= 0
        if last:
            for ident, entry in list(_SHARED.items()):
                if entry is shared:
                    del _SHARED[ident]
    dispatcher = getattr(shared.sdk, "_event_dispatcher", None)
    if last and dispatcher is not None:
        # A connect still in progress races engine.io's disconnect: let it finish.
        connecting = getattr(dispatcher, "_bg_thread", None)
        if connecting is not None:
            connecting.join(timeout=10)
        with contextlib.suppress(Exception):  # best effort: closing, not measuring
            dispatcher.disconnect()


def versions() -> dict[str, str]:
    """The client libraries' versions (the SDK's internals used here are pinned by them)."""
    return library_versions(DISTRIBUTIONS)


# -- the SDK's pieces the substrate calls directly ------------------------------------------


def create_request(
    name: str,
    labels: dict[str, str],
    *,
    target: str | None,
    snapshot: str | None,
    image: str | None,
    resources: tuple[int | None, int | None, int | None],
    auto_stop_min: int,
    auto_delete_min: int | None,
) -> Any:
    """The body of ``POST /sandbox``, as ``Daytona.create`` would build it: from a snapshot,
    or from an image (then with CPU, memory and disk in GiB), the code toolbox set to Python."""
    from daytona import Image
    from daytona.common.daytona import CODE_TOOLBOX_LANGUAGE_LABEL
    from daytona_api_client import CreateBuildInfo, CreateSandbox

    body = CreateSandbox(
        name=name,
        labels={**labels, CODE_TOOLBOX_LANGUAGE_LABEL: "python"},
        env=kit.command_env(),
        target=target,
        snapshot=snapshot,
        auto_stop_interval=auto_stop_min,
        auto_delete_interval=auto_delete_min,
    )
    if image:
        body.build_info = CreateBuildInfo(dockerfile_content=Image.base(image).dockerfile())
        body.cpu, body.memory, body.disk = resources
    return body


def sandbox_of(sdk: Any, dto: Any) -> Any:
    """The SDK's `Sandbox` for a created sandbox's answer, wired to the shared client's event
    subscriptions (so that its start wait is woken by the socket.io event)."""
    from daytona._sync.sandbox import Sandbox

    return Sandbox(
        dto,
        sdk._toolbox_api_client,
        sdk._sandbox_api,
        "python",
        subscription_manager=sdk._subscription_manager,
        http_client=sdk._http_client,
    )


def labelled(
    api: Any, labels: dict[str, str], call: Callable[..., Any], timeout_s: float
) -> Iterator[Any]:
    """Every sandbox carrying `labels`, page by page, each list through `call` (the
    substrate's rate-limit policy). A sandbox whose deletion errored is hidden from the list by
    default, and is exactly the kind of leftover the reaper exists for: it is asked for."""
    wanted = json.dumps(labels)
    cursor = None
    while True:
        page = call(
            "list sandboxes",
            lambda c=cursor: api.list_sandboxes(
                labels=wanted, cursor=c, include_errored_deleted=True, _request_timeout=timeout_s
            ),
        )
        yield from page.items
        cursor = page.next_cursor
        if not cursor:
            return


def why_lost(api: Any, sandbox_id: str, timeout_s: float) -> str | None:
    """Why the sandbox can't run commands any more (asked of the API), or None when it can or
    the API can't say."""
    try:
        dto = api.get_sandbox(sandbox_id, _request_timeout=timeout_s)
    except Exception as exc:
        return f"sandbox {sandbox_id} is gone" if status(exc) == 404 else None
    if state(dto) in DEAD_STATES:
        return f"sandbox is {state(dto)}: {dto.error_reason or 'no reason given'}"
    return None


# -- errors -----------------------------------------------------------------------------------


def status(exc: BaseException) -> int | None:
    """The HTTP status of an SDK or generated-client error, if it has one."""
    for attr in ("status_code", "status"):
        value = getattr(exc, attr, None)
        if isinstance(value, int):
            return value
    cause = exc.__cause__
    return status(cause) if cause is not None and cause is not exc else None


def message(exc: BaseException) -> str:
    """The API's own message (from its JSON envelope) rather than a dump of headers."""
    body = getattr(exc, "body", None)
    if isinstance(body, (str, bytes)):
        with contextlib.suppress(ValueError, TypeError):
            data = json.loads(body)
            if isinstance(data, dict) and isinstance(data.get("message"), str):
                return data["message"]
    return str(exc).splitlines()[0] if str(exc) else type(exc).__name__


def explain(exc: BaseException) -> str:
    """ "HTTP <status>: <message>", or the message alone for an error without a status."""
    code = status(exc)
    return f"HTTP {code}: {message(exc)}" if code else message(exc)


def is_transport(exc: BaseException) -> bool:
    """The API did not answer (connection refused, reset, read timeout)."""
    import urllib3

    return isinstance(exc, (urllib3.exceptions.HTTPError, OSError, TimeoutError))


def state(obj: Any) -> str | None:
    """A sandbox's state as text (the SDK gives an enum, the generated client a string)."""
    value = getattr(obj, "state", None)
    return getattr(value, "value", value)
