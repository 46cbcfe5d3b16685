"""Local emulations of the cloud substrates, each a real server on loopback.

Why: Kubernetes, EC2 and Daytona can't be reached from the machines rtax is developed and tested
on, yet their adapters must be exercised through the real client libraries over real HTTP
(docs/emulations.md). Each emulation speaks its service's real protocol and backs every
environment it hands out with a real container of the runner image, so commands really run. Every
sample taken through one is labelled fidelity ``emulated``: the numbers describe this machine's
Docker engine behind an emulated API, never the cloud service itself.

One package per emulated service (its API rules, object store, backing containers and server
apart), imported lazily (like `rtax.substrates`). An emulation is used in-process by the tests,
and by ``rtax emulate``, which keeps them running in the foreground and publishes where they
listen in a state file so that ``rtax probe --substrate kubernetes`` (and the scheduler) find
them. Every emulation takes faults in one vocabulary, `rtax.emulation.faults`.
"""

from __future__ import annotations

import fcntl
import json
import os
import tempfile
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from rtax.core import paths
from rtax.core.kinds import CONNECTION_PARAMS, EMULATIONS, UnknownKind, load
from rtax.substrates.emulated import EMULATION_HEADER

#: substrate kind -> "module:Class" of its emulation (`rtax.core.kinds`)
REGISTRY: dict[str, str] = EMULATIONS


@runtime_checkable
class Emulation(Protocol):
    """A real server on loopback for one substrate kind; a context manager."""

    #: the substrate kind it emulates ("kubernetes", "ec2", "daytona")
    kind: str

    def start(self) -> None:
        """Listen on 127.0.0.1 (an ephemeral port unless one was given); return once serving."""
        ...

    def stop(self) -> None:
        """Stop serving and remove every container this emulation made."""
        ...

    @property
    def url(self) -> str:
        """Where it listens (http://127.0.0.1:PORT), once started."""
        ...

    def substrate_params(self) -> dict[str, Any]:
        """Constructor parameters that point a substrate of `kind` at this emulation; they
        include ``fidelity="emulated"`` and never a real credential."""
        ...

    def __enter__(self) -> Emulation: ...

    def __exit__(self, *exc: object) -> None: ...


class LoopbackServer:
    """What every emulation shares: a context manager around `start`/`stop`, and its URL on
    127.0.0.1 once `start` has bound `port` (0 until then, or the port asked for)."""

    port: int

    def start(self) -> None:
        raise NotImplementedError

    def stop(self) -> None:
        raise NotImplementedError

    def __enter__(self) -> Any:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"


def identified(app: Any, kind: str) -> Any:
    """`app` (ASGI) with `EMULATION_HEADER` on every HTTP response and WebSocket handshake, so
    that an adapter pointed here labels its samples ``emulated`` whatever its configuration
    says (`rtax.substrates.emulated`)."""
    header = (EMULATION_HEADER.lower().encode(), kind.encode())
    starts = ("http.response.start", "websocket.accept", "websocket.http.response.start")

    async def stamped(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] not in ("http", "websocket"):
            await app(scope, receive, send)
            return

        async def send_stamped(message: dict[str, Any]) -> None:
            if message["type"] in starts:
                message = {**message, "headers": [*message.get("headers", []), header]}
            await send(message)

        await app(scope, receive, send_stamped)

    return stamped


def kinds() -> list[str]:
    """Substrate kinds that have an emulation, sorted."""
    return sorted(REGISTRY)


def emulation_class(kind: str) -> type:
    """Import and return the emulation class for substrate `kind`."""
    try:
        return load(REGISTRY, kind)
    except UnknownKind:
        raise ValueError(f"no emulation for {kind!r} (emulated: {', '.join(kinds())})") from None


def get_emulation(kind: str, **options: Any) -> Emulation:
    """A (not yet started) emulation of substrate `kind`."""
    return emulation_class(kind)(**options)


# -- the state file that `rtax emulate` publishes ------------------------------------------------
# Liveness is a lock, not a pid: `rtax emulate` holds an exclusive flock on emulations.lock for
# its whole life (the kernel drops it however the process dies), and the state file counts only
# while that lock is held. A pid could be reused by an unrelated process.


class EmulationsBusy(RuntimeError):
    """Another ``rtax emulate`` already serves from this data folder."""


def state_path() -> Path:
    """Where a running ``rtax emulate`` says what it serves (in the data folder)."""
    return paths.data_dir() / "emulations.json"


class Publisher:
    """The one ``rtax emulate`` of a data folder: holds the lock, writes and removes the state
    file. Take it before starting anything, so that two can't start at once."""

    def __init__(self, path: Path | None = None) -> None:
        self.path = path or state_path()
        self._fd: int | None = None

    def acquire(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path.with_suffix(".lock"), os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            try:
                holder = f" (pid {json.loads(self.path.read_text())['pid']})"
            except (OSError, ValueError, KeyError):
                holder = ""  # still starting: it publishes once its emulations serve
            raise EmulationsBusy(
                f"another `rtax emulate`{holder} already serves from {self.path.parent}; "
                "stop it first"
            ) from None
        self._fd = fd

    def publish(self, emulations: dict[str, dict[str, Any]]) -> Path:
        """Write kind -> substrate parameters, atomically and readable by this user only
        (the Daytona emulation's made-up key is in there, and the emulations run commands)."""
        fd, tmp = tempfile.mkstemp(dir=self.path.parent, prefix=".emulations.")
        with os.fdopen(fd, "w") as out:
            json.dump({"pid": os.getpid(), "emulations": emulations}, out, indent=2)
        os.replace(tmp, self.path)
        return self.path

    def release(self) -> None:
        if self._fd is None:
            return
        self.path.unlink(missing_ok=True)  # ours: we hold the lock
        os.close(self._fd)  # drops the lock
        self._fd = None

    def __enter__(self) -> Publisher:
        self.acquire()
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()


def running(*, path: Path | None = None) -> dict[str, dict[str, Any]]:
    """kind -> substrate parameters of the emulations a live ``rtax emulate`` serves ({} if
    none: no state file, or no process holds its lock any more)."""
    path = path or state_path()
    try:
        fd = os.open(path.with_suffix(".lock"), os.O_RDONLY)
    except OSError:
        return {}
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        return {}  # nobody holds it: whatever the state file says is stale
    except BlockingIOError:
        pass  # a live `rtax emulate` holds it
    finally:
        os.close(fd)
    try:
        state = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    emulations = state.get("emulations")
    return emulations if isinstance(emulations, dict) else {}


def overlay(emulated: dict[str, Any], configured: dict[str, Any]) -> dict[str, Any]:
    """A substrate's parameters when it runs against an emulation: what the configuration sets
    (image, resources, mode, ...), then the emulation's endpoint and credentials, which no
    configured connection parameter can override (`CONNECTION_PARAMS`, ``*_env`` forms
    included), and always fidelity ``emulated``."""
    kept = {
        k: v
        for k, v in configured.items()
        if k.removesuffix("_env") not in CONNECTION_PARAMS
        and k.removesuffix("_env") not in emulated
    }
    return {**kept, **emulated, "fidelity": "emulated"}


def start_all(kinds_: list[str], log: Any = print) -> list[Emulation]:
    """Start the emulations of `kinds_` (building the runner image their environments run in,
    if missing); on any failure stop those already started and re-raise."""
    from rtax.assets.image import ensure_runner

    ensure_runner(log=log)
    started: list[Emulation] = []
    try:
        for kind in kinds_:
            emu = get_emulation(kind)
            started.append(emu)  # stop() is idempotent: a half-started one is stopped too
            emu.start()
            log(f"{kind} emulation serving at {emu.url}")
    except BaseException:
        stop_all(started)
        raise
    return started


def stop_all(emulations: list[Emulation]) -> None:
    """Stop every emulation, the last started first; one failing doesn't keep the others up."""
    errors = []
    for emu in reversed(emulations):
        try:
            emu.stop()
        except Exception as exc:
            errors.append(f"{emu.kind}: {exc}")
    if errors:
        raise RuntimeError("could not stop cleanly: " + "; ".join(errors))
