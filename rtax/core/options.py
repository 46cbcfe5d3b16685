"""A rollout's timeouts and hooks: how long each wait may last, and who may stop it.

Why in the shared vocabulary: the probe runner (`rtax.rollouts.rollout`) enforces them, and
the composition (`rtax.compose`) gives a warm pool's environments the same ones for their
lifetime, so both read one declaration (docs/configuration.md#scheduler).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass


@dataclass
class RolloutOptions:
    """Timeouts of one rollout. The deadline bounds the whole rollout's wall time."""

    running_timeout_s: float = 300.0
    ready_timeout_s: float = 120.0
    cleanup_timeout_s: float = 120.0
    deadline_s: float = 3600.0
    #: The fixed pause between ready attempts (docs/measurement.md#resolution): short, because the
    #: pause before the successful attempt is the ready phase's resolution; not shorter, because an
    #: instantly failing attempt must not become tens of thousands of sample rows (at most
    #: ready_timeout_s / ready_interval_s of them).
    ready_interval_s: float = 0.02
    #: set from outside (a scheduler shutting down) to end the rollout at its next step
    cancel: threading.Event | None = None
    #: told once when the rollout starts, before its create request, with that moment on the
    #: `now` timeline: a load run measures each launch's dispatch lag against it (docs/load.md)
    on_start: Callable[[float], None] | None = None
