"""A series: the rollouts that may be aggregated together, with one key, one label and one order
wherever rtax groups, labels, detects, exports or draws (docs/measurement.md#series).

Why one type: a series used to be spelled out in seven places, in different orders and widths,
so a warm pool's claims or another vantage's rollouts could be merged into a cold, local series
by one reader and kept apart by the next. Two rollouts belong to one series when they ran the
same workload on the same substrate, the same way, seen from the same place:

| dimension | what it separates | unmarked default |
|---|---|---|
| ``substrate`` | the configured name (``docker-gvisor``) | |
| ``mode`` | how actions reach the environment (``exec``, ``session``) | ``exec`` |
| ``fidelity`` | ``real``, ``emulated``, ``modelled`` (docs/measurement.md#fidelity) | ``real`` |
| ``launch_type`` | how it got a ready environment (``cold``, ``warm``) | ``cold`` |
| ``vantage`` | where the probe ran (docs/ray.md#vantages) | ``local`` |
| ``tier``, ``steps`` | the workload (``T2``, 50 actions) | |

The key (`Series.key`) is what incidents store and links carry, so its text never changes for
an existing series: ``docker T2 S=10 session real``, then `` warm`` and ``@ eu`` only when they
differ from the defaults. The label (`Series.label`) is what a person reads:
``docker · session · T2 S=50``, ``daytona [emulated] · T0``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import astuple, dataclass
from typing import Any

#: The dimensions of a series, in the one order every grouping, table and export uses.
DIMENSIONS: tuple[str, ...] = (
    "substrate",
    "mode",
    "fidelity",
    "launch_type",
    "vantage",
    "tier",
    "steps",
)

#: A series whose fidelity was never said (a row written before it was recorded): shown as
#: such, never silently as ``real`` (docs/measurement.md#fidelity).
UNKNOWN_FIDELITY = "unknown"
#: The vantage of a probe run by this process, without an engine elsewhere (docs/ray.md).
LOCAL_VANTAGE = "local"
#: The unmarked value of each dimension that has one: a label names only what differs.
UNMARKED: dict[str, str] = {
    "mode": "exec",
    "fidelity": "real",
    "launch_type": "cold",
    "vantage": LOCAL_VANTAGE,
}
#: What a missing value of a dimension stands for (a row from before it was recorded).
MISSING: dict[str, str] = {**UNMARKED, "fidelity": UNKNOWN_FIDELITY}


def _text(value: Any, default: str) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)) or value == "":
        return default
    return str(value)


def _steps(value: Any) -> int:
    try:
        number = float(value)
    except (TypeError, ValueError):
        return 0
    return int(number) if math.isfinite(number) else 0


@dataclass(frozen=True, order=True)
class Series:
    """One series; ordered by `DIMENSIONS` (the order tables and cards sort by)."""

    substrate: str
    mode: str = "exec"
    fidelity: str = UNKNOWN_FIDELITY
    launch_type: str = "cold"
    vantage: str = LOCAL_VANTAGE
    tier: str = "T0"
    steps: int = 0

    @classmethod
    def of(cls, row: Mapping[str, Any]) -> Series:
        """The series of a run row, a record's run, a summary row or any mapping holding the
        `DIMENSIONS` (missing or empty ones take their defaults; a missing fidelity is
        `UNKNOWN_FIDELITY`)."""
        get = row.get
        return cls(
            substrate=str(row["substrate"]),
            mode=_text(get("mode"), MISSING["mode"]),
            fidelity=_text(get("fidelity"), MISSING["fidelity"]),
            launch_type=_text(get("launch_type"), MISSING["launch_type"]),
            vantage=_text(get("vantage"), MISSING["vantage"]),
            tier=str(row["tier"]),
            steps=_steps(get("steps")),
        )

    def values(self) -> tuple[Any, ...]:
        """The dimensions' values, in `DIMENSIONS` order (read field by field: `astuple`
        deep-copies, and summarizing a million runs called this three million times)."""
        return tuple(getattr(self, name) for name in DIMENSIONS)

    @property
    def key(self) -> str:
        """The series as one stable text (incidents, links): ``docker T2 S=10 session real``,
        then the launch type unless cold and ``@ <vantage>`` unless local; a cold, local
        series keeps the text it had before either dimension existed."""
        key = f"{self.substrate} {self.tier} S={self.steps} {self.mode} {self.fidelity}"
        if self.launch_type != "cold":
            key += f" {self.launch_type}"
        return key if self.vantage == LOCAL_VANTAGE else f"{key} @ {self.vantage}"

    @property
    def name(self) -> str:
        """The substrate's side as a person reads it: ``docker · session · warm [emulated] @
        eu``, each part only when it differs from its default."""
        return series_name(self.substrate, self.mode, self.fidelity, self.launch_type, self.vantage)

    @property
    def workload(self) -> str:
        """``T1`` for a tier's fixed script, ``T2 S=50`` for a 50-action trajectory."""
        return workload_name(self.tier, self.steps)

    @property
    def label(self) -> str:
        """Name and workload together: ``docker · session · T2 S=50``."""
        return f"{self.name} · {self.workload}"


def series_name(
    substrate: str,
    mode: str | None = None,
    fidelity: str | None = None,
    launch_type: str | None = None,
    vantage: str | None = None,
) -> str:
    """`Series.name` from its parts (a column of values, a page's legend); a part that is None
    or its default is left unmarked."""
    label = substrate
    if mode and mode != UNMARKED["mode"]:
        label += f" · {mode}"
    if launch_type and launch_type != UNMARKED["launch_type"]:
        label += f" · {launch_type}"
    if fidelity and fidelity != UNMARKED["fidelity"]:
        label += f" [{fidelity}]"
    if vantage and vantage != UNMARKED["vantage"]:
        label += f" @ {vantage}"
    return label


def workload_name(tier: str, steps: Any) -> str:
    """`Series.workload` from its parts."""
    steps = _steps(steps)
    return tier if not steps else f"{tier} S={steps}"


#: A selector's keys: the dimensions, each naming one value or a list of values.
SELECTOR_KEYS: tuple[str, ...] = DIMENSIONS


@dataclass(frozen=True)
class Selector:
    """Which series a maintenance window, an objective or a quorum covers: per dimension, the
    values it allows (an empty tuple: any). ``Selector()`` covers every series.

    Why one type: a maintenance window, an SLO and the CLI's ``--series`` flags name series the
    same way, ``{substrate = ["docker", "docker-gvisor"], tier = "T0"}``, so one reader and one
    `matches` serve them all (docs/alerts.md#selecting-series)."""

    substrate: tuple[str, ...] = ()
    mode: tuple[str, ...] = ()
    fidelity: tuple[str, ...] = ()
    launch_type: tuple[str, ...] = ()
    vantage: tuple[str, ...] = ()
    tier: tuple[str, ...] = ()
    steps: tuple[int, ...] = ()

    def matches(self, series: Series | Mapping[str, Any]) -> bool:
        """Whether `series` (a `Series` or any row `Series.of` reads) is one of these."""
        found = series if isinstance(series, Series) else Series.of(series)
        return all(
            not allowed or value in allowed
            for allowed, value in zip(astuple(self), found.values(), strict=True)
        )

    def as_dict(self) -> dict[str, list[Any]]:
        """The dimensions it restricts, as JSON stores them (`from_dict` reads it back)."""
        return {k: list(v) for k, v in zip(SELECTOR_KEYS, astuple(self), strict=True) if v}

    @classmethod
    def from_dict(cls, raw: Mapping[str, Any]) -> Selector:
        """A selector from `as_dict`'s form (a stored maintenance window); keys are trusted."""
        values = {k: tuple(v) if isinstance(v, list | tuple) else (v,) for k, v in raw.items()}
        if "steps" in values:
            values["steps"] = tuple(int(s) for s in values["steps"])
        return cls(**values)

    def describe(self) -> str:
        """``substrate docker, tier T0``; ``every series`` when it restricts nothing."""
        parts = [
            f"{k} {' or '.join(str(x) for x in v)}"
            for k, v in zip(SELECTOR_KEYS, astuple(self), strict=True)
            if v
        ]
        return ", ".join(parts) if parts else "every series"
