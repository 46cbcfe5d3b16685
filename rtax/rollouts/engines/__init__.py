"""Where a rollout runs once it is chosen: this process's threads (`local`) or a Ray cluster
(`ray`), behind one `Engine` protocol (`rtax.rollouts.engines.base`, docs/ray.md)."""

from __future__ import annotations

import threading

from rtax.compose import Composition
from rtax.rollouts.engines.base import Engine, RolloutSpec
from rtax.rollouts.engines.local import LocalEngine
from rtax.settings.engine import EngineSettings

__all__ = ["Engine", "LocalEngine", "RolloutSpec", "make"]


def make(settings: EngineSettings, compose: Composition, cancel: threading.Event) -> Engine:
    """The engine `settings` name (Ray imported only when asked for)."""
    if settings.kind == "ray":
        from rtax.rollouts.engines.ray import RayEngine

        return RayEngine(settings, cancel)
    return LocalEngine(compose, cancel, settings)
