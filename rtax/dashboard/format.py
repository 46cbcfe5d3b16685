"""The one formatting rule of the dashboard: how a number reads, what a column is called, where
`n` stands. Pure (no Streamlit): `rtax.dashboard.style` draws tables with it, the status board
and the pages' figures use its functions, and tests check its exact strings.

Why one module (docs/dashboard.md#formatting): a duration is a duration on every page, so it
reads the same everywhere: milliseconds below a second, seconds with three significant digits
from there, hours for projections; an unknown value is a blank cell, never `None` or `NaN`;
a percentile's `n` stands beside it. Only the display is formatted: the data behind a table,
and every CSV download, keep the raw machine columns (internal names, full precision).
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Iterable, Sequence
from typing import Any

import pandas as pd

Formatter = Callable[[Any], str]


def missing(value: Any) -> bool:
    """None, NaN, NaT or pandas' NA: what shows as a blank cell."""
    if value is None:
        return True
    try:
        return bool(pd.isna(value))
    except (TypeError, ValueError):  # a list or an array is a value, not a missing one
        return False


def significant(value: float, digits: int = 3) -> str:
    """`value` to `digits` significant digits, never in exponent form; integer digits above
    are kept (4,167, not 4.17e+03), with thousands separators."""
    if value == 0:
        return "0"
    if not math.isfinite(value):
        return "" if math.isnan(value) else ("∞" if value > 0 else "-∞")
    exponent = math.floor(math.log10(abs(value)))
    decimals = max(digits - 1 - exponent, 0)
    if decimals and abs(round(value, decimals)) >= 10 ** (exponent + 1):
        decimals -= 1  # 9.996 rounds up a digit: 10.0, not 10.00
    return f"{value:,.{decimals}f}"


def _numeric(write: Callable[[float], str]) -> Formatter:
    """`write` for a number, blank for a missing value, the text itself for one that is no
    number (a fit's lengths "10,50,150" in a column named like a count)."""

    def cell(value: Any) -> str:
        if missing(value):
            return ""
        try:
            number = float(value)
        except (TypeError, ValueError):
            return str(value)
        return write(number)

    cell.__doc__ = write.__doc__
    cell.__name__ = write.__name__
    cell.number = write  # type: ignore[attr-defined]  # for a column known to hold numbers
    return cell


@_numeric
def duration(value: float) -> str:
    """ms below a second, then s, both with three significant digits; blank when unknown."""
    if not math.isfinite(value):
        return f"{significant(value)} s"
    if abs(value) < 0.9995:  # below what rounds to 1.00 s
        return f"{significant(value * 1000)} ms"
    return f"{significant(value)} s"


@_numeric
def hours(value: float) -> str:
    """Projected hours: three significant digits (every integer digit above 100 h)."""
    return f"{significant(value)} h"


def age(seconds: Any) -> str:
    """How long ago: s, min, h, d as the size calls for ("never" when there is none)."""
    if missing(seconds):
        return "never"
    value = float(seconds)
    if value < 120:
        return f"{value:.0f} s ago"
    if value < 7_200:
        return f"{value / 60:.0f} min ago"
    if value < 172_800:
        return f"{value / 3600:.1f} h ago"
    return f"{value / 86_400:.1f} d ago"


@_numeric
def size(value: float) -> str:
    """Bytes held (memory, disk): binary units, three significant digits."""
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(value) < 1024 or unit == "GiB":
            break
        value /= 1024
    return f"{value:,.0f} B" if unit == "B" else f"{significant(value)} {unit}"


@_numeric
def rate(value: float) -> str:
    """A share as a percentage with one decimal."""
    return f"{value:.1%}"


@_numeric
def count(value: float) -> str:
    """A whole number with thousands separators."""
    return f"{value:,.0f}"


@_numeric
def number(value: float) -> str:
    """A plain number (r², actions at a crossover): three significant digits."""
    return significant(value)


@_numeric
def plain(value: float) -> str:
    """A number of no known kind: a whole number as it is, another to three significant
    digits."""
    return f"{value:,.0f}" if value.is_integer() else significant(value)


@_numeric
def ratio(value: float) -> str:
    """A ratio of two like quantities: three significant digits and ×."""
    return f"{significant(value)}×"


@_numeric
def usd(value: float) -> str:
    """Dollars with cents."""
    return f"${value:,.2f}"


@_numeric
def usd_per_hour(value: float) -> str:
    return f"${value:,.2f}/h"


@_numeric
def minutes(value: float) -> str:
    return f"{significant(value)} min"


@_numeric
def per_second(value: float) -> str:
    return f"{significant(value)} /s"


def stamp(value: Any) -> str:
    """A moment in UTC to the second."""
    if missing(value):
        return ""
    try:
        moment = pd.Timestamp(value)
    except (TypeError, ValueError):
        return str(value)
    moment = moment.tz_localize("UTC") if moment.tzinfo is None else moment.tz_convert("UTC")
    return moment.strftime("%Y-%m-%d %H:%M:%S UTC")


def text(value: Any) -> str:
    if missing(value):
        return ""
    if isinstance(value, bool):
        return "yes" if value else "no"
    return str(value)


#: Columns whose kind their name's ending does not tell.
_KINDS: dict[str, Formatter] = {
    **dict.fromkeys(("p50", "p95", "p99", "mean", "seconds"), duration),
    **dict.fromkeys(("p95_lo", "p95_hi", "p99_lo", "p99_hi"), duration),
    **dict.fromkeys(("seconds_per_trajectory", "seconds_at_crossover"), duration),
    **dict.fromkeys(("n", "runs", "steps", "trajectories", "actions", "rollouts", "id"), count),
    **dict.fromkeys(("harness_errors", "launched", "max_rollouts_per_day", "attempts"), count),
    **dict.fromkeys(("events", "bad"), count),
    "allowed": number,
    **dict.fromkeys(("success_rate", "useful_share", "failure_rate", "failure_rate_max"), rate),
    **dict.fromkeys(("ratio_to_best", "magnitude", "spread"), ratio),
    **dict.fromkeys(("r2", "crossover_steps"), number),
    **dict.fromkeys(("cost", "usd", "usd_per_million"), usd),
    "price_per_hour": usd_per_hour,
    **dict.fromkeys(("env_minutes", "max_env_minutes_per_day"), minutes),
    **dict.fromkeys(("start", "end", "bucket_start", "bucket_end"), stamp),
}


def formatter(name: str, values: pd.Series | None = None) -> Formatter:
    """How the cells of column `name` read: by its name (`_s` seconds, `hours`, `_rate`, `_n`,
    `_at`, ...), else by its values' type (`plain` numbers)."""
    if name in _KINDS:
        return _KINDS[name]
    if name.endswith("_age_s"):
        return age
    if name.startswith("burn_"):  # an objective's burn rate over a window (burn_1h)
        return ratio
    if name.endswith("_per_s"):
        return per_second
    if name.endswith("_s"):
        return duration
    if name.endswith("hours"):
        return hours
    if name.endswith(("_rate", "_share")):
        return rate
    if name.endswith(("_n", "_count", "_total")) or name.startswith("n_"):
        return count
    if name.endswith("_at"):
        return stamp
    if name.endswith("_usd"):
        return usd
    if name.endswith("_bytes"):
        return size
    if values is not None and pd.api.types.is_bool_dtype(values):
        return text
    if values is not None and pd.api.types.is_numeric_dtype(values):
        return plain
    return text


#: Human headers of the pages' columns (the cells carry the units of durations, hours,
#: dollars and shares; a header names the unit its cells don't).
HEADERS: dict[str, str] = {
    "series": "Series",
    "substrate": "Substrate",
    "tier": "Tier",
    "steps": "Actions (S)",
    "workload": "Workload",
    "fidelity": "Fidelity",
    "phase": "Phase",
    "runs": "Runs",
    "n": "n",
    "success_rate": "Success",
    "harness_errors": "Harness errors",
    "ttfc_n": "First command n",
    "ttfc_p50_s": "First command p50",
    "ttfc_p95_s": "First command p95",
    "ttfc_p99_s": "First command p99",
    "ttfc_p99_lo_s": "First command p99 from (95 %)",
    "ttfc_p99_hi_s": "First command p99 to (95 %)",
    "ttfc_res_s": "First command resolution",
    "episode_n": "Episode n",
    "episode_p50_s": "Episode p50",
    "episode_p95_s": "Episode p95",
    "episode_p99_s": "Episode p99",
    "episode_res_s": "Episode resolution",
    "idle_memory_n": "Idle memory n",
    "idle_memory_p50_bytes": "Memory held idle p50",
    "snapshot_bytes": "Snapshots on disk",
    "last_probe_age_s": "Last probe",
    "res_s": "Resolution",
    "mean": "Mean",
    "p50": "p50",
    "p95": "p95",
    "p99": "p99",
    "p95_lo": "p95 from (95 %)",
    "p95_hi": "p95 to (95 %)",
    "p99_lo": "p99 from (95 %)",
    "p99_hi": "p99 to (95 %)",
    "seconds": "Trajectory time",
    "per_action_s": "Per action",
    "fixed_s": "Fixed",
    "r2": "r²",
    "faster_below": "Faster below",
    "faster_above": "Faster above",
    "crossover_steps": "Crossover (actions)",
    "seconds_at_crossover": "Time at crossover",
    "scenario": "Scenario",
    "trajectories": "Trajectories",
    "actions": "Actions",
    "per_rollout_s": "Per rollout",
    "model_hours": "Model",
    "published_hours": "Published",
    "source": "Source",
    "seconds_per_trajectory": "Per trajectory",
    "worker_hours": "Worker-hours",
    "extra_hours": "Extra hours",
    "ratio_to_best": "Ratio to best",
    "wall_clock_hours": "Wall clock",
    "price_per_hour": "Price",
    "cost": "Cost",
    "basis": "Basis",
    "wall_s": "Wall (mean)",
    "actions_s": "Actions (mean)",
    "floor_hours": "Wall-clock floor",
    "binding": "Binding limit",
    "billed_hours": "Billed",
    "useful_hours": "Useful",
    "useful_share": "Useful share",
    "usd": "Dollars",
    "usd_per_million": "Dollars per million trajectories",
    "prices_unset": "Prices unset",
    "rollouts": "Rollouts",
    "max_rollouts_per_day": "Rollouts allowed per day",
    "env_minutes": "Environment time",
    "max_env_minutes_per_day": "Environment time allowed per day",
    "status": "Status",
    "id": "Incident",
    "metric": "Metric",
    "state": "State",
    "start": "Start",
    "end": "End",
    "before_p50_s": "p50 before",
    "after_p50_s": "p50 after",
    "before_rate": "Success before",
    "after_rate": "Success after",
    "magnitude": "Magnitude",
    "detail": "Detail",
    "bucket_start": "Bucket start",
    "bucket_end": "Bucket end",
    "objective": "Objective",
    "indicator": "Indicator",
    "target_rate": "Target",
    "period": "Period",
    "events": "Events",
    "bad": "Bad",
    "allowed": "Bad allowed",
    "budget_left_share": "Budget left",
    "alerting": "Firing (or unknown)",
}
_WORDS = {"ttfc": "first command", "res": "resolution", "p50": "p50", "p95": "p95", "p99": "p99"}


def header(name: str) -> str:
    """A column's human header: `HEADERS`, else its words (`create_res_s` -> "Create
    resolution"; the unit is in the cells)."""
    if name in HEADERS:
        return HEADERS[name]
    if name.endswith("_per_s"):
        return header(name.removesuffix("_per_s")) + " per second"
    words = [_WORDS.get(w, w) for w in name.removesuffix("_s").split("_") if w]
    label = " ".join(words) or name
    return (
        label if re.fullmatch(r"p\d+", words[0] if words else "") else label[0].upper() + label[1:]
    )


#: A statistic of samples, optionally prefixed by its metric (`ttfc_p50_s`, `p95`, `mean`).
_STAT = re.compile(r"^(?:(?P<prefix>[a-z0-9]+?)_)?(?:p\d+|mean)(?:_s)?$")
#: Statistics of samples whose name does not say so.
_STATS = {"seconds": "", "seconds_per_trajectory": "", "wall_s": ""}


def _stat_prefix(name: str) -> str | None:
    """The prefix of a statistic column ("" for a bare one), None for other columns."""
    if name in _STATS:
        return _STATS[name]
    found = _STAT.match(name)
    return None if found is None else (found.group("prefix") or "")


def ordered(columns: Sequence[str]) -> list[str]:
    """`columns` with each sample count (`n`, `<metric>_n`) moved directly before the first
    statistic it counts (`p50`, `mean`, `<metric>_p50_s`, ...): `n` stands beside its
    percentiles wherever a table puts it."""
    out = list(columns)
    for name in list(out):
        if name != "n" and not name.endswith("_n"):
            continue
        prefix = "" if name == "n" else name.removesuffix("_n")
        stats = [c for c in out if _stat_prefix(c) == prefix]
        if not stats:
            continue
        out.remove(name)
        out.insert(out.index(stats[0]), name)
    return out


#: A p99 column: blank there means too few samples (`rtax.analysis.stats.shown`), said so.
_P99 = re.compile(r"^(?:[a-z0-9]+_)?p99(?:_s)?$")
TOO_FEW = "n too small"


def column(name: str, values: pd.Series) -> list[str]:
    """The display strings of column `name`: its formatter cell by cell, the missing cells
    blank (a column of numbers is formatted without asking each cell what it is: the Data
    page's previews have tens of thousands of cells), "n too small" in a p99 column."""
    cells = _cells(name, values)
    return [TOO_FEW if c == "" else c for c in cells] if _P99.match(name) else cells


def _cells(name: str, values: pd.Series) -> list[str]:
    write = formatter(name, values)
    if write is stamp:
        moments = pd.to_datetime(values, utc=True, format="ISO8601", errors="coerce")
        shown = moments.dt.strftime("%Y-%m-%d %H:%M:%S UTC")
        return [write(v) if t != t else t for v, t in zip(values, shown, strict=True)]
    number = getattr(write, "number", None)
    if number is None or not pd.api.types.is_numeric_dtype(values):
        blank = values.isna().to_numpy()
        if write is text and not pd.api.types.is_bool_dtype(values):
            write = str
        return ["" if b else write(v) for v, b in zip(values.tolist(), blank, strict=True)]
    floats = values.astype(float).to_numpy()
    return ["" if v != v else number(v) for v in floats.tolist()]


def formatters(frame: pd.DataFrame) -> dict[str, Formatter]:
    """Per column of `frame`, its cells' formatter."""
    return {c: formatter(c, frame[c]) for c in frame.columns}


def display(frame: pd.DataFrame) -> pd.DataFrame:
    """`frame` as its table shows it: columns in display order, human headers, every cell a
    string (blank where unknown)."""
    columns = ordered(list(frame.columns))
    cells = {header(name): column(name, frame[name]) for name in columns}
    return pd.DataFrame(cells, index=range(len(frame)), columns=[header(c) for c in columns])


def _slug(part: str) -> str:
    return re.sub(r"[^A-Za-z0-9._]+", "-", part).strip("-")


def file_name(name: str, parts: Iterable[str], suffix: str = "csv") -> str:
    """A snapshot's file name: ``rtax-<name>-<part>-...`` (``rtax-overview-last-24-hours-
    docker-T2.csv``), every part made safe for a file name."""
    slugs = [_slug(p) for p in (name, *parts)]
    return "rtax-" + "-".join(s for s in slugs if s) + f".{suffix}"


def short(value: float) -> str:
    """A count as a slider reads it (1 k, 20 k, 1.5 M), or every digit where a short form
    would round it (1,234,567)."""
    for size, unit in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(value) >= size:
            scaled = value / size
            if scaled == round(scaled, 2):
                return f"{scaled:g} {unit}"
            return f"{value:,.0f}" if value == int(value) else f"{value:,}"
    return f"{value:g}"
