"""The containers behind the emulated instances, and their SSM agents.

Why (docs/emulations.md): a rollout's commands must really run. Every instance RunInstances
launches gets a container of the runner image (through `DockerSubstrate` named
``ec2-emulation``, labelled rtax with this process as owner, so the reaper finds the orphans of
a dead one), created in the background; its "SSM agent" is online only once the container runs,
so the emulated ready phase is the container's start. TerminateInstances removes the container.
StopInstances, reboots, spot interruptions and instance status checks are not modelled.
"""

from __future__ import annotations

import contextlib
import threading
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from rtax.core.failures import SubstrateError
from rtax.emulation.backing import remove as remove_backing
from rtax.emulation.faults import Fault, Faults
from rtax.substrates.base import Environment
from rtax.substrates.docker.substrate import DockerSubstrate


@dataclass
class Instance:
    instance_id: str
    #: the ``agent`` fault taken at launch (never online, or online late), if any
    fault: Fault | None = None
    env: Environment | None = None
    online: bool = False
    terminated: bool = False
    launched_at: datetime = field(default_factory=lambda: datetime.now(UTC))


class Fleet:
    """The emulated instances: their backing containers and whether their agent is online.
    `faults` is the emulation's (its ``agent`` operation)."""

    def __init__(self, image: str, faults: Faults) -> None:
        self.backing = DockerSubstrate(name="ec2-emulation", image=image)
        self.faults = faults
        self.lock = threading.Lock()
        self._instances: dict[str, Instance] = {}
        self._threads: list[threading.Thread] = []
        self._made: set[str] = set()
        self._stopping = False
        #: set by `stop`: removals still retrying give up, `stop` removes what is left
        self._stop = threading.Event()

    def start(self) -> None:
        """Reap the containers of dead emulations (a live one's are kept)."""
        from rtax.substrates import reaper

        reaper.reap([self.backing])
        self._stopping = False
        self._stop.clear()

    def stop(self) -> None:
        """Wait for the background work, then remove every container made (idempotent)."""
        self._stopping = True
        self._stop.set()
        for thread in list(self._threads):
            thread.join(timeout=120)
        self._threads.clear()
        with self.lock:
            envs = [i.env for i in self._instances.values() if i.env is not None]
            self._instances.clear()
        for env in envs:
            with contextlib.suppress(SubstrateError):
                self.backing.destroy(env, 60)
        for leftover in self.backing.leftovers():  # anything a racing launch made
            if leftover.env_id in self._made:
                self.backing.destroy(leftover, 60)
        self._made.clear()

    def env_of(self, instance_id: str) -> Environment | None:
        """The running container of `instance_id` (None: none, or gone). Call with `lock`."""
        instance = self._instances.get(instance_id)
        return instance.env if instance else None

    def online(self, wanted: set[str] | None = None) -> list[Instance]:
        """The instances whose agent is online (among `wanted`, if given). Call with `lock`."""
        return [
            i
            for i in self._instances.values()
            if i.online and (wanted is None or i.instance_id in wanted)
        ]

    def launch(self, instance_id: str) -> None:
        with self.lock:
            if instance_id in self._instances:  # a RunInstances repeated with its ClientToken
                return
            fault = self.faults.take("agent")
            self._instances[instance_id] = Instance(instance_id, fault=fault)
        self.background(self._boot, instance_id)

    def terminate(self, instance_id: str) -> None:
        with self.lock:
            instance = self._instances.get(instance_id)
            if instance is None or instance.terminated:
                return
            instance.terminated, instance.online = True, False
            env, instance.env = instance.env, None
        if env is not None:
            self.background(self._remove, env)

    def _remove(self, env: Environment) -> None:
        """Remove a backing container, retried while the engine is away (`remove_backing`)."""
        remove_backing(self.backing, env, stop=self._stop)

    def background(self, fn: Any, *args: Any) -> None:
        """Run `fn` in a thread that `stop` waits for."""
        thread = threading.Thread(target=fn, args=args, daemon=True)
        with self.lock:
            self._threads = [t for t in self._threads if t.is_alive()]
            self._threads.append(thread)
        thread.start()

    def _boot(self, instance_id: str) -> None:
        """Create and start the backing container; the agent is online once it runs (unless
        an ``agent`` fault says never, or later). If the container can't be made, the agent
        simply never comes online (as on a broken AMI)."""
        try:
            env = self.backing.create(instance_id)
        except SubstrateError:
            return
        self._made.add(env.env_id)
        try:
            self.backing.wait_running(env, 120)
        except SubstrateError:
            self._remove(env)
            return
        with self.lock:
            instance = self._instances.get(instance_id)
            fault = instance.fault if instance else None
        if fault is not None:
            self.faults.wait(fault.delay_s)  # the agent registers late
        with self.lock:
            instance = self._instances.get(instance_id)
            gone = instance is None or instance.terminated or self._stopping
            if not gone:
                instance.env = env
                instance.online = fault is None or not fault.failing
        if gone:
            self._remove(env)
