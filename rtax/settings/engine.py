"""The ``[engine]`` table: where rollouts run (docs/ray.md#configuration), checked one line per
mistake like the rest of the configuration (`rtax.settings.config`).

Why a module of its own: the engine's settings are read by `rtax.settings.config` (which must
not import the engines, nor Ray) and used by `rtax.rollouts.engines.base`; a vantage is a label
value, checked here once for the engine and the plans alike.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from rtax.core.checks import Bad, is_text, names, unknown_keys
from rtax.core.series import LOCAL_VANTAGE

KINDS = ("local", "ray")
#: The Ray node label that names a node's vantage (`ray start --labels rtax.io/vantage=eu`).
DEFAULT_LABEL = "rtax.io/vantage"
_KEYS = frozenset({"kind", "address", "vantage", "vantages", "label", "namespace"})


@dataclass(frozen=True)
class EngineSettings:
    """The ``[engine]`` table (docs/ray.md#configuration)."""

    kind: str = "local"
    #: Ray: the cluster to join (`ray.init`'s address: "auto", "10.0.0.5:6379", "ray://...")
    address: str | None = None
    #: local: the name of this host's vantage
    vantage: str = LOCAL_VANTAGE
    #: Ray: the vantages every plan probes from, unless the plan says (empty: spread)
    vantages: tuple[str, ...] = ()
    #: Ray: the node label whose value is a node's vantage
    label: str = DEFAULT_LABEL
    #: Ray: the namespace rtax's tasks run in
    namespace: str = "rtax"


def parse(table: Any, bad: Bad) -> EngineSettings:
    """The ``engine`` key: a kind (``engine = "ray"``) or a table; each mistake through `bad`."""
    if table is None:
        return EngineSettings()
    if isinstance(table, str):
        table = {"kind": table}
    if not isinstance(table, dict):
        bad("engine", 'must be "local", "ray" or a table ([engine])')
        return EngineSettings()
    unknown_keys(table, "engine", _KEYS, bad, say_known=sorted(_KEYS))
    kind = table.get("kind", "local")
    if kind not in KINDS:
        bad("engine.kind", f"must be one of {', '.join(KINDS)}")
        kind = "local"
    address = table.get("address")
    if address is not None and not is_text(address):
        bad("engine.address", 'must be a Ray address ("auto", "host:6379", "ray://host:10001")')
        address = None
    if kind == "ray" and address is None:
        bad("engine.address", 'a ray engine needs the cluster\'s address ("auto" finds it)')
    vantage = table.get("vantage", LOCAL_VANTAGE)
    if not is_vantage(vantage):
        bad("engine.vantage", "must be a label value (letters, digits, '-', '_', '.')")
        vantage = LOCAL_VANTAGE
    vantages = vantage_list(table.get("vantages", []), "engine.vantages", bad)
    label = table.get("label", DEFAULT_LABEL)
    if not is_text(label) or label.startswith("ray.io/"):
        bad("engine.label", "must be a node label key outside Ray's own ray.io/ namespace")
        label = DEFAULT_LABEL
    namespace = table.get("namespace", "rtax")
    if not is_text(namespace):
        bad("engine.namespace", "must be a non-empty string")
        namespace = "rtax"
    if kind == "local":
        for key in ("address", "vantages", "label", "namespace"):
            if key in table:
                bad(f"engine.{key}", 'is for engine = "ray" only')
    elif "vantage" in table:
        bad("engine.vantage", "a Ray node's vantage is its label; set it with `ray start --labels`")
    return EngineSettings(kind, address, str(vantage), vantages, label, namespace)


def is_vantage(value: Any) -> bool:
    """A vantage is a Ray (and Kubernetes) label value: up to 63 letters, digits, '-', '_' and
    '.', starting and ending with a letter or digit."""
    if not isinstance(value, str) or not 0 < len(value) <= 63:
        return False
    inner = all(c.isascii() and (c.isalnum() or c in "-_.") for c in value)
    return inner and value[0].isalnum() and value[-1].isalnum()


def vantage_list(value: Any, key: str, bad: Bad) -> tuple[str, ...]:
    """A list of distinct vantages (a single string is a list of one)."""
    value = names(value)
    if value is None or not all(is_vantage(v) for v in value):
        bad(key, "must be a list of vantages (label values: letters, digits, '-', '_', '.')")
        return ()
    if len(set(value)) != len(value):
        bad(key, "names a vantage twice")
    return tuple(dict.fromkeys(value))


def check_plans(
    settings: EngineSettings,
    plans: Iterable[Any],
    substrates: Iterable[Any],
    bad: Bad,
) -> None:
    """What the engine can't do with the rest of the configuration: vantages need Ray (the
    local engine runs every rollout here), Ray's nodes can't reach an emulation (it
    listens on the scheduler's loopback, docs/emulations.md), and a warm pool lives in the
    scheduler's process, where a Ray task on another node can't claim from it."""
    if settings.kind != "ray":
        for plan in plans:
            if plan.vantages:
                bad(f"plans.{plan.name}.vantages", 'needs engine = "ray" (docs/ray.md)')
        return
    for conf in substrates:
        if conf.emulate:
            bad(
                f"substrates.{conf.name}.emulate",
                "an emulation listens on the scheduler's loopback, out of a Ray node's reach",
            )
        if getattr(conf, "pool", None) is not None:
            bad(
                f"substrates.{conf.name}.pool",
                "a warm pool lives in the scheduler's process, out of a Ray task's reach: "
                'use engine = "local" for pooled substrates',
            )
