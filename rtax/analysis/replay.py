"""Replay one series through the incident engine, one sample at a time, as the scheduler's
detection pass would see it arrive (docs/alerts.md#evaluation).

Why a replay of `rtax.analysis.incidents.decide` and not a model of it: the evaluation's
false-alarm and detection figures are only worth reading if they measure the code that alerts.
The scheduler reads each series' newest ``window`` runs from the store, asks `evaluate` and
`decide`, and writes what they say; this does the same with the runs held in arrays and the
incidents in a dict, so a pass here and a pass there differ only in where rows are kept.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from typing import Any

import numpy as np

from rtax.analysis.incidents import Closing, Opening, Past, Window, decide, evaluate, stamp
from rtax.analysis.rules import Detection, Rule
from rtax.core.failures import OWN_ERRORS

#: Where synthetic series begin (any fixed moment: only the spacing matters).
EPOCH = datetime(2026, 1, 1, tzinfo=UTC)


@dataclass(frozen=True)
class Recording:
    """One series' rollouts in order: when each started (ISO text), whether it succeeded,
    whether it failed for rtax's own reasons, and its two latencies (NaN: not measured)."""

    started_at: np.ndarray
    ok: np.ndarray
    own: np.ndarray
    time_to_first_command: np.ndarray
    episode: np.ndarray
    substrate: str = "replay"

    def __len__(self) -> int:
        return len(self.ok)

    @classmethod
    def synthetic(
        cls,
        latency: Sequence[float],
        ok: Sequence[bool] | None = None,
        interval_s: float = 300.0,
        episode: Sequence[float] | None = None,
    ) -> Recording:
        """A series of time-to-first-command samples one `interval_s` apart from `EPOCH`
        (failed ones, where `ok` says so, carry no latency)."""
        n = len(latency)
        flags = np.ones(n, dtype=bool) if ok is None else np.asarray(ok, dtype=bool)
        ttfc = np.where(flags, np.asarray(latency, dtype=float), np.nan)
        other = np.full(n, np.nan) if episode is None else np.asarray(episode, dtype=float)
        return cls(
            started_at=timestamps(n, interval_s),
            ok=flags,
            own=np.zeros(n, dtype=bool),
            time_to_first_command=ttfc,
            episode=np.where(flags, other, np.nan),
        )

    def window(self, lo: int, hi: int) -> Window:
        """Rollouts lo..hi-1 as the detection pass reads them."""
        return Window(
            substrate=self.substrate,
            started_at=self.started_at[lo:hi],
            ok=self.ok[lo:hi],
            own=self.own[lo:hi],
            latency={
                "time_to_first_command": self.time_to_first_command[lo:hi],
                "episode": self.episode[lo:hi],
            },
        )


def timestamps(n: int, interval_s: float, start: datetime = EPOCH) -> np.ndarray:
    """n store timestamps `interval_s` apart."""
    step = timedelta(seconds=interval_s)
    return np.array([stamp(start + i * step) for i in range(n)])


@dataclass(frozen=True)
class Incident:
    """An incident the replay opened: at which sample it opened (0-based: the pass that ran
    after that sample arrived), the sample its change began at, its rule and finding, and when
    and why it was resolved (None: still open at the end)."""

    opened_at: int
    start: int
    rule: str
    metric: str
    detail: str
    magnitude: float | None
    resolved_at: int | None = None
    resolution: str | None = None


@dataclass
class _State:
    """The replay's incidents table: per (metric, rule), the open row and the newest resolved."""

    rows: dict[tuple[str, str], dict[str, Any]] = field(default_factory=dict)
    last: dict[tuple[str, str], dict[str, Any]] = field(default_factory=dict)

    def past(self, rule: Rule) -> Past:
        key = (rule.metric, rule.name)
        return Past(self.rows.get(key), self.last.get(key))


def replay(
    recording: Recording,
    rules: Sequence[Rule],
    detection: Detection,
    *,
    start: int = 1,
) -> list[Incident]:
    """Every incident the shipped engine opens over `recording`, a pass after each sample from
    sample `start` on (a pass with the window full of a stationary past, when the caller wants
    only what follows it)."""
    state = _State()
    opened: list[Incident] = []
    index_of = {str(t): i for i, t in enumerate(recording.started_at)}
    for i in range(start, len(recording)):
        lo = max(0, i + 1 - detection.window)
        window = recording.window(lo, i + 1)
        now = datetime.fromisoformat(str(recording.started_at[i]))
        verdicts = evaluate(window, rules, detection, now, state.past)
        for decision in decide(verdicts, window, detection, state.past):
            if isinstance(decision, Opening):
                _open(state, opened, decision, i, index_of)
            else:
                _close(state, opened, decision, i)
    return opened


def _open(
    state: _State, opened: list[Incident], decision: Opening, i: int, index_of: dict[str, int]
) -> None:
    found = decision.finding
    key = (found.metric, found.rule)
    state.rows[key] = {
        "id": len(opened),
        "metric": found.metric,
        "start": found.start,
        "end": None,
        "before_p50": found.before_p50,
        "after_p50": found.after_p50,
        "detail": found.detail,
        "resolution": None,
    }
    opened.append(
        Incident(i, index_of[found.start], found.rule, found.metric, found.detail, found.magnitude)
    )


def _close(state: _State, opened: list[Incident], decision: Closing, i: int) -> None:
    key = next(k for k, row in state.rows.items() if row["id"] == decision.incident_id)
    row = state.rows.pop(key)
    row.update(end=decision.end, resolution=decision.resolution)
    state.last[key] = row
    opened[row["id"]] = replace(opened[row["id"]], resolved_at=i, resolution=decision.resolution)


class SeriesFileError(ValueError):
    """A series file that can't be read; the message names the line."""


_TRUE = {"1", "true", "ok", "yes"}
_FALSE = {"0", "false", "failed", "no"}


def read_series(lines: Sequence[str], name: str = "series") -> dict[str, Recording]:
    """Series from CSV text: one latency in seconds per line (no header); or a header with
    ``latency_s`` and optionally ``ok`` (1/0, true/false, ok/failed; a failed rollout's
    latency may be empty); or rtax's recording (``series``, ``started_at``,
    ``time_to_first_command_s``, ``episode_s``, ``status``, ``error_class``: one `Recording`
    per series, benchmarks/series/README.md). Without timestamps, samples are 5 minutes apart."""
    rows = [line.strip() for line in lines if line.strip() and not line.startswith("#")]
    if not rows:
        raise SeriesFileError("no samples")
    header = [h.strip() for h in rows[0].split(",")]
    if "series" in header and "started_at" in header:
        return _recorded(header, rows[1:])
    if "latency_s" not in header:
        return {name: Recording.synthetic(_column(rows, 0, header=False))}
    at = header.index("latency_s")
    ok_at = header.index("ok") if "ok" in header else None
    latency, ok = [], []
    for number, row in enumerate(rows[1:], start=2):
        cells = [c.strip() for c in row.split(",")]
        flag = True if ok_at is None else _flag(cells, ok_at, number)
        ok.append(flag)
        latency.append(_seconds(cells, at, number, required=flag))
    return {name: Recording.synthetic(latency, ok)}


def _column(rows: Sequence[str], at: int, *, header: bool) -> list[float]:
    return [
        _seconds([c.strip() for c in row.split(",")], at, n, required=True)
        for n, row in enumerate(rows[1:] if header else rows, start=2 if header else 1)
    ]


def _seconds(cells: Sequence[str], at: int, line: int, *, required: bool) -> float:
    text = cells[at] if at < len(cells) else ""
    if not text and not required:
        return math.nan
    try:
        value = float(text)
    except ValueError:
        raise SeriesFileError(f"line {line}: {text!r} is not a latency in seconds") from None
    if not math.isfinite(value) or value <= 0:
        raise SeriesFileError(f"line {line}: a latency must be a number of seconds > 0")
    return value


def _flag(cells: Sequence[str], at: int, line: int) -> bool:
    text = (cells[at] if at < len(cells) else "").lower()
    if text in _TRUE:
        return True
    if text in _FALSE:
        return False
    raise SeriesFileError(f"line {line}: ok must be 1/0, true/false or ok/failed, not {text!r}")


def _recorded(header: Sequence[str], rows: Sequence[str]) -> dict[str, Recording]:
    columns: dict[str, dict[str, list[str]]] = {}
    for row in rows:
        cells = dict(zip(header, (c.strip() for c in row.split(",")), strict=False))
        series = columns.setdefault(cells["series"], {k: [] for k in header})
        for key in header:
            series[key].append(cells.get(key, ""))
    out = {}
    for name, cells in columns.items():
        status = np.array(cells["status"])
        out[name] = Recording(
            started_at=np.array(cells["started_at"]),
            ok=status == "ok",
            own=np.isin(np.array(cells["error_class"]), list(OWN_ERRORS)),
            time_to_first_command=_floats(cells["time_to_first_command_s"]),
            episode=_floats(cells["episode_s"]),
            substrate=name.split(" ")[0],
        )
    return out


def _floats(cells: Sequence[str]) -> np.ndarray:
    return np.array([float(c) if c else math.nan for c in cells], dtype=float)
