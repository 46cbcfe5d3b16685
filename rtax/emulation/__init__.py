"""Local emulations of the cloud substrates, each a real server on loopback.

Why: Kubernetes, EC2 and Daytona can't be reached from the machines rtax is developed and tested
on, yet their adapters must be exercised through the real client libraries over real HTTP
(README.md#emulations). Each emulation speaks its service's real protocol and backs every
environment it hands out with a real container of the runner image, so commands really run. Every
sample taken through one is labelled fidelity ``emulated``: the numbers describe this machine's
Docker engine behind an emulated API, never the cloud service itself.

One module per emulated service, imported lazily (like `rtax.substrates`). An emulation is used
in-process by the tests, and by ``rtax emulate``, which keeps them running in the foreground and
publishes where they listen in a state file so that ``rtax probe --substrate kubernetes`` (and the
scheduler) find them.
"""

from __future__ import annotations

import importlib
import json
import os
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from rtax import paths

#: substrate kind -> "module:Class" of its emulation
REGISTRY: dict[str, str] = {
    "kubernetes": "rtax.emulation.kubernetes:KubernetesEmulation",
    "ec2": "rtax.emulation.ec2:Ec2Emulation",
    "daytona": "rtax.emulation.daytona:DaytonaEmulation",
}


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


def kinds() -> list[str]:
    """Substrate kinds that have an emulation, sorted."""
    return sorted(REGISTRY)


def emulation_class(kind: str) -> type:
    """Import and return the emulation class for substrate `kind`."""
    try:
        target = REGISTRY[kind]
    except KeyError:
        raise ValueError(f"no emulation for {kind!r} (emulated: {', '.join(kinds())})") from None
    module_name, _, class_name = target.partition(":")
    return getattr(importlib.import_module(module_name), class_name)


def get_emulation(kind: str, **options: Any) -> Emulation:
    """A (not yet started) emulation of substrate `kind`."""
    return emulation_class(kind)(**options)


# -- the state file that `rtax emulate` publishes ------------------------------------------------


def state_path() -> Path:
    """Where a running ``rtax emulate`` says what it serves (in the data folder)."""
    return paths.data_dir() / "emulations.json"


def publish(emulations: dict[str, dict[str, Any]], *, path: Path | None = None) -> Path:
    """Write kind -> substrate parameters for the emulations this process serves."""
    path = path or state_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps({"pid": os.getpid(), "emulations": emulations}, indent=2))
    tmp.replace(path)
    return path


def unpublish(*, path: Path | None = None) -> None:
    """Remove the state file if this process wrote it."""
    path = path or state_path()
    try:
        if json.loads(path.read_text()).get("pid") == os.getpid():
            path.unlink()
    except (OSError, ValueError):
        pass


def running(*, path: Path | None = None) -> dict[str, dict[str, Any]]:
    """kind -> substrate parameters of the emulations a live ``rtax emulate`` serves ({} if
    none: no state file, or its process is gone)."""
    from rtax.reaper import pid_alive

    path = path or state_path()
    try:
        state = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    pid = state.get("pid")
    if not isinstance(pid, int) or not pid_alive(pid):
        return {}
    emulations = state.get("emulations")
    return emulations if isinstance(emulations, dict) else {}


def overlay(emulated: dict[str, Any], configured: dict[str, Any]) -> dict[str, Any]:
    """A substrate's parameters when it runs against an emulation: the emulation's endpoint
    and defaults, then what the configuration sets, and always fidelity ``emulated`` (a sample
    taken through an emulation can't be labelled anything else)."""
    return {**emulated, **configured, "fidelity": "emulated"}


def endpoint(params: dict[str, Any]) -> str:
    """The address an emulation's substrate parameters point at (each client names it
    differently)."""
    for key in ("endpoint", "host", "endpoint_url", "api_url"):
        if params.get(key):
            return str(params[key])
    return "?"


def start_all(kinds_: list[str], log: Any = print) -> list[Emulation]:
    """Start the emulations of `kinds_` (building the runner image their environments run in,
    if missing); on any failure stop those already started and re-raise."""
    from rtax.image import ensure_runner

    ensure_runner(log=log)
    started: list[Emulation] = []
    try:
        for kind in kinds_:
            emu = get_emulation(kind)
            emu.start()
            started.append(emu)
            log(f"{kind} emulation serving at {endpoint(emu.substrate_params())}")
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
