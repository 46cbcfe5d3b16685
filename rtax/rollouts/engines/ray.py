"""Rollouts as Ray tasks on an existing cluster, placed by vantage (docs/ray.md).

Why these choices:

- **No CPU reserved** (``num_cpus=0``): a probe waits on a substrate's API, it computes nothing;
  a reserved CPU per probe deadlocks a small cluster (and reserves what the RL job needs).
- **Placed by node label**: a node declares its vantage with a Ray node label (``ray start
  --labels rtax.io/vantage=eu``; KubeRay: the worker group's ``labels``), and a rollout for a
  vantage carries the matching ``label_selector`` (Ray >= 2.49). A plan without vantages
  spreads its rollouts over every node (``SPREAD``). Custom resources (``{"vantage:eu": 1}``)
  were the older way; labels need no fake quantities and are what KubeRay propagates.
- **The node runs the probe runner and returns the finished record**; the scheduler's one
  writer stores it. The node stamps the record with its vantage and engine (node id, host):
  the row's ``host`` is the node's.
- **Credentials come from the node**: a task's only argument is the `RolloutSpec`, whose
  substrate entry names environment variables (``*_env``); the node reads its own. A spec in
  which a value rtax holds as a secret appears is refused before dispatch.
- **Engine failures are rtax's**: a node lost mid-rollout (or no alive node for a vantage) is an
  ``engine_error`` row. Tasks are never retried by Ray (``max_retries=0``): a retry would be a
  second attempt under the first one's name, and the next cycle is the retry. The run id is
  chosen before dispatch and a rollout's future settles once, so nothing is stored twice; what
  the lost task created is left to the reaper, which runs on every alive node (`sweep`).
"""

from __future__ import annotations

import contextlib
import logging
import pickle
import queue
import socket
import threading
import time
from collections.abc import Sequence
from concurrent.futures import Future
from dataclasses import dataclass
from typing import Any

from rtax.compose import Composition
from rtax.core import redaction
from rtax.core.failures import ENGINE_ERROR, HarnessError
from rtax.core.options import RolloutOptions
from rtax.core.record import RolloutRecord
from rtax.rollouts.deadline import STOP_GRACE_S
from rtax.rollouts.engines.base import Log, RolloutSpec, build, failure, settle, stamp
from rtax.rollouts.rollout import run_rollout
from rtax.settings import SubstrateConfig
from rtax.settings.engine import EngineSettings
from rtax.substrates import reaper

log = logging.getLogger(__name__)

#: The vantage of a node without the vantage label, and of a spread rollout lost before anyone
#: learned where it ran.
UNLABELLED = "unlabelled"
UNKNOWN = "unknown"
#: Beyond a rollout's deadline: how long a task may wait for a worker process to start on its
#: node and import rtax before the backstop gives up on it.
PLACEMENT_GRACE_S = 120.0
#: How often the watchdog looks at the rollouts in flight (backstops, lost vantages, a stop).
WATCH_S = 0.5
#: How long the list of alive nodes is trusted.
NODES_TTL_S = 1.0
#: How long preparing a substrate on a node may take (building the runner image, once).
PREPARE_TIMEOUT_S = 1800.0


@dataclass
class _Flight:
    spec: RolloutSpec
    future: Future[RolloutRecord | None]
    ref: Any
    backstop: float


class RayEngine:
    """Rollouts as Ray tasks (module docstring). `start` joins the cluster at the settings'
    address; `close` leaves it (the cluster is not rtax's to stop)."""

    name = "ray"

    def __init__(self, settings: EngineSettings, cancel: threading.Event, ray: Any = None) -> None:
        """`ray`: the Ray module (imported by `start` when None; tests hand in a stand-in)."""
        self.settings = settings
        self.cancel = cancel
        self._ray: Any = ray
        self._joined = False
        self._flights: dict[str, _Flight] = {}
        self._lock = threading.Lock()
        self._done: queue.SimpleQueue[_Flight | None] = queue.SimpleQueue()
        self._closed = threading.Event()
        self._threads: list[threading.Thread] = []
        self._nodes: tuple[float, list[dict[str, str]]] = (-1e9, [])

    # -- life ------------------------------------------------------------------------------

    def start(self) -> None:
        if self._ray is None:
            import ray

            self._ray = ray
        ray = self._ray
        if not ray.is_initialized():
            ray.init(
                address=self.settings.address,
                namespace=self.settings.namespace,
                log_to_driver=False,
                logging_level=logging.WARNING,
            )
            self._joined = True
        remote = ray.remote(num_cpus=0, max_retries=0)
        self._rollout = remote(node_rollout)
        self._prepare = remote(node_prepare)
        self._sweep = remote(node_sweep)
        for target, name in ((self._collect, "ray-collect"), (self._watch, "ray-watch")):
            thread = threading.Thread(target=target, name=name, daemon=True)
            thread.start()
            self._threads.append(thread)
        nodes = self.nodes(fresh=True)
        here = sorted({n["vantage"] for n in nodes})
        log.info("ray engine: %d nodes, vantages %s", len(nodes), ", ".join(here) or "none")
        for vantage in self.settings.vantages:
            if vantage not in here:
                log.warning("ray engine: no alive node is labelled %s", self._selector(vantage))

    def close(self) -> None:
        """Cancel what is in flight (each task cleans up on its node), then leave the cluster."""
        if self._closed.is_set():
            return
        self._cancel_all()
        self._closed.set()
        self._done.put(None)
        for thread in self._threads:
            thread.join(STOP_GRACE_S)
        if self._joined and self._ray is not None:
            self._ray.shutdown()
            self._joined = False

    # -- nodes -----------------------------------------------------------------------------

    def nodes(self, fresh: bool = False) -> list[dict[str, str]]:
        """The alive nodes: node_id, host and vantage (its label's value, else `UNLABELLED`)."""
        with self._lock:
            taken, nodes = self._nodes
        if fresh or time.monotonic() - taken > NODES_TTL_S:
            nodes = [
                {
                    "node_id": n["NodeID"],
                    "host": n.get("NodeManagerHostname", ""),
                    "vantage": (n.get("Labels") or {}).get(self.settings.label) or UNLABELLED,
                }
                for n in self._ray.nodes()
                if n.get("Alive")
            ]
            with self._lock:
                self._nodes = (time.monotonic(), nodes)
        return nodes

    def _selector(self, vantage: str) -> str:
        return f"{self.settings.label}={vantage}"

    def _on(self, node: dict[str, str]) -> dict[str, Any]:
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        return {"scheduling_strategy": NodeAffinitySchedulingStrategy(node["node_id"], soft=False)}

    # -- rollouts --------------------------------------------------------------------------

    def submit(self, spec: RolloutSpec) -> Future[RolloutRecord | None]:
        future: Future[RolloutRecord | None] = Future()
        if self.cancel.is_set() or self._closed.is_set():
            settle(future, None)
            return future
        if secrets_in(spec):
            message = "refused: the rollout's arguments would carry a secret rtax holds"
            settle(future, self._failed(spec, HarnessError.error_class, message))
            return future
        vantage = spec.vantage
        if vantage is not None and vantage not in {n["vantage"] for n in self.nodes()}:
            message = f"no alive Ray node is labelled {self._selector(vantage)}"
            settle(future, self._failed(spec, ENGINE_ERROR, message))
            return future
        if vantage is not None:
            options: dict[str, Any] = {"label_selector": {self.settings.label: vantage}}
        else:
            options = {"scheduling_strategy": "SPREAD"}
        try:
            ref = self._rollout.options(**options).remote(spec, self.settings.label)
        except Exception as exc:  # the cluster is gone, or refused the task
            settle(future, self._failed(spec, ENGINE_ERROR, f"{type(exc).__name__}: {exc}"))
            return future
        backstop = time.monotonic() + spec.deadline_s * 1.1 + 1.0 + PLACEMENT_GRACE_S
        flight = _Flight(spec, future, ref, backstop)
        with self._lock:
            self._flights[spec.run_id] = flight
        ref.future().add_done_callback(lambda _, f=flight: self._done.put(f))
        return future

    def _failed(self, spec: RolloutSpec, error_class: str, message: str) -> RolloutRecord:
        record = failure(spec, error_class, message)
        info = {"kind": self.name, "label": self.settings.label, "lost": message}
        return stamp(record, spec.vantage or UNKNOWN, info)

    def _collect(self) -> None:
        """Settle each rollout as its task ends (on a thread of its own, never Ray's: the
        scheduler stores the record in the future's callback)."""
        while (flight := self._done.get()) is not None:
            with self._lock:
                mine = self._flights.pop(flight.spec.run_id, None) is flight
            if not mine:  # the watchdog gave up on it first: its outcome is already given
                continue
            try:
                outcome = self._outcome(flight)
            except Exception as exc:  # never leave the scheduler waiting on a future
                outcome = self._failed(flight.spec, HarnessError.error_class, repr(exc))
            settle(flight.future, outcome)

    def _outcome(self, flight: _Flight) -> RolloutRecord | None:
        errors = self._ray.exceptions
        try:
            return self._ray.get(flight.ref, timeout=10)
        except errors.TaskCancelledError:
            return None
        except errors.RayTaskError as exc:  # the task itself raised: rtax's node code
            if self.cancel.is_set():
                return None
            cause = exc.cause if isinstance(exc.cause, BaseException) else exc
            text = f"{type(cause).__name__}: {cause}"
            return self._failed(flight.spec, HarnessError.error_class, f"on the node: {text}")
        except Exception as exc:  # a lost node or worker, a lost object: the engine's
            if self.cancel.is_set():
                return None
            text = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
            return self._failed(flight.spec, ENGINE_ERROR, f"{type(exc).__name__}: {text}")

    def _watch(self) -> None:
        """Backstops, vantages that lost their last node, and a stop (`cancel`)."""
        while not self._closed.wait(WATCH_S):
            if self.cancel.is_set():
                self._cancel_all()
                continue
            with self._lock:
                flights = list(self._flights.values())
            if not flights:
                continue
            now = time.monotonic()
            try:
                alive = {n["vantage"] for n in self.nodes()}
            except Exception:  # the cluster does not answer: backstops still apply
                alive = None
            for flight in flights:
                vantage = flight.spec.vantage
                if now > flight.backstop:
                    message = f"the rollout's task did not end within {flight.backstop:.0f} s"
                    self._give_up(flight, "deadline_exceeded", message)
                elif alive is not None and vantage is not None and vantage not in alive:
                    message = f"the last node labelled {self._selector(vantage)} was lost"
                    self._give_up(flight, ENGINE_ERROR, message)

    def _give_up(self, flight: _Flight, error_class: str, message: str) -> None:
        """Settle `flight` as failed, then cancel its task (in that order: the cancelled
        task's own end must not be taken for its outcome)."""
        with self._lock:
            if self._flights.pop(flight.spec.run_id, None) is not flight:
                return  # it ended meanwhile
        log.error("rollout %s: %s", flight.spec.run_id, message)
        settle(flight.future, self._failed(flight.spec, error_class, message))
        with contextlib.suppress(Exception):
            self._ray.cancel(flight.ref)  # it cleans up on its node if it still runs

    def _cancel_all(self) -> None:
        with self._lock:
            flights, self._flights = list(self._flights.values()), {}
        for flight in flights:
            settle(flight.future, None)
            with contextlib.suppress(Exception):
                self._ray.cancel(flight.ref)  # KeyboardInterrupt on the node: it cleans up

    # -- preparing and reaping, on every node ------------------------------------------------

    def prepare(self, conf: SubstrateConfig, log_line: Log) -> None:
        """Prepare `conf`'s substrate on every alive node; raise unless one at least can."""
        nodes = self.nodes(fresh=True)
        refs = [(n, self._prepare.options(**self._on(n)).remote(conf)) for n in nodes]
        usable = 0
        for node, ref in refs:
            try:
                problem = self._ray.get(ref, timeout=PREPARE_TIMEOUT_S)
            except Exception as exc:
                problem = f"{type(exc).__name__}: {exc}"
            where = f"node {node['host']} ({node['vantage']})"
            if problem:
                log_line(f"{conf.name} is not usable on {where}: {problem}")
            else:
                usable += 1
        if not usable:
            raise RuntimeError(f"{conf.name} is usable on none of the {len(nodes)} Ray nodes")

    def sweep(self, confs: Sequence[SubstrateConfig], log_to: Any) -> list[reaper.Orphan]:
        """Reap on every alive node in turn (a node's containers and directories are its own;
        one at a time, so two nodes never race for one cloud leftover)."""
        found: list[reaper.Orphan] = []
        for node in self.nodes(fresh=True):
            try:
                found += self._ray.get(
                    self._sweep.options(**self._on(node)).remote(list(confs)),
                    timeout=reaper.REMOVE_TIMEOUT_S * 2,
                )
            except Exception as exc:
                log_to.warning("reaper: node %s: %s: %s", node["host"], type(exc).__name__, exc)
        reaper.said(found, log_to, " on a Ray node")
        return found


def secrets_in(spec: RolloutSpec) -> list[str]:
    """The secrets rtax holds that `spec`'s serialized form would carry (none, by design)."""
    data = pickle.dumps(spec)
    return [s for s in redaction.held() if s.encode() in data]


# -- on the node (a Ray worker process) -----------------------------------------------------------


@dataclass
class _Node:
    compose: Composition
    vantage: str
    info: dict[str, Any]
    prepared: set[tuple[str, str]]


_node: _Node | None = None


def _here(label: str) -> _Node:
    """This worker's node, once per worker process: its vantage (the label's value), the
    composition that serves T2's repository from here, the substrates already prepared."""
    global _node
    if _node is None:
        import ray

        redaction.install()
        context = ray.get_runtime_context()
        value = context.get_node_labels().get(label)
        vantage = (value[0] if isinstance(value, list) and value else value) or UNLABELLED
        info = {
            "kind": "ray",
            "label": label,
            "vantage": vantage,
            "node_id": context.get_node_id(),
            "node_host": socket.gethostname(),
            "ray": ray.__version__,
        }
        _node = _Node(Composition(emulations="off"), str(vantage), info, set())
    return _node


def node_rollout(spec: RolloutSpec, label: str) -> RolloutRecord:
    """The Ray task: `spec`'s rollout on this node, timed by the probe runner, stamped with
    this node's vantage. Its substrate is prepared once per worker process, outside any
    phase."""
    node = _here(label)
    key = (spec.substrate.name, repr(sorted(spec.overrides.items())))

    def ready(substrate: Any) -> None:
        if key not in node.prepared:
            substrate.prepare(lambda message: log.info("%s: %s", spec.substrate.name, message))
            node.prepared.add(key)

    built = build(spec, node.compose.build, node.compose.source, ready)
    if isinstance(built, RolloutRecord):
        return stamp(built, node.vantage, node.info)
    substrate, workload = built
    try:
        options = RolloutOptions(deadline_s=spec.deadline_s)
        record = run_rollout(substrate, workload, run_id=spec.run_id, options=options)
    finally:
        with contextlib.suppress(Exception):  # releasing, not measuring
            substrate.close()
    return stamp(record, node.vantage, node.info)


def node_prepare(conf: SubstrateConfig) -> str | None:
    """The Ray task that prepares `conf`'s substrate on this node: None, or why it can't."""
    try:
        substrate = Composition(emulations="off").build(conf)
        substrate.prepare(lambda message: log.info("%s: %s", conf.name, message))
        substrate.close()
    except Exception as exc:
        return f"{type(exc).__name__}: {redaction.scrub(str(exc))}"
    return None


def node_sweep(confs: list[SubstrateConfig]) -> list[reaper.Orphan]:
    """The Ray task that reaps `confs`' leftovers on this node (`rtax.substrates.reaper.sweep`)."""
    by_name = {c.name: c for c in confs}
    compose = Composition(emulations="off")
    return reaper.sweep(list(by_name), lambda n: compose.build(by_name[n]), log)
