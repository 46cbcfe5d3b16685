"""What the Timeline draws over its points: incidents through their lifecycle, the changes
accepted as the new baseline, maintenance windows, and the incidents table below the chart.

Why apart from the points (`rtax.analysis.timeline`, docs/dashboard.md#timeline): the points
say how a series did; these say what rtax and its people made of it. An incident is shaded from
its change point to its end (to now while open) and labelled with its place in the lifecycle
(`rtax.analysis.incidents.state_of`, docs/alerts.md#lifecycle); one resolved as ``baseline`` is
drawn apart from a recovery, with a mark where its new level was accepted; a maintenance window
(docs/alerts.md#maintenance), from the configuration or the store alike, is a band over the
series it covers. This module is pure.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import pandas as pd

from rtax.analysis.incidents import state_of
from rtax.analysis.maintenance import Window
from rtax.core.series import Series


def spans(
    incidents: pd.DataFrame, keys: Mapping[str, str], now: pd.Timestamp
) -> list[dict[str, Any]]:
    """The incidents of the series shown (`keys`: series key -> its label) as spans to draw:
    from the change (``start``) to its end, or to `now` while open, each with its place in the
    lifecycle (`incidents.state_of`) and how to draw it (``kind``: open, acknowledged,
    baseline, resolved). An incident resolved as ``baseline`` ends where its new level was
    accepted (``accepted``: its last sample), which is drawn apart from a recovery."""
    out = []
    if incidents is None or incidents.empty:
        return out
    for row in incidents.to_dict("records"):
        if row["series"] not in keys:
            continue
        start = _utc(row["start"])
        ended = row.get("end")
        end = _utc(ended) if isinstance(ended, str) and ended else now
        state = state_of(row)
        kind = _kind(row)
        out.append(
            {
                "id": int(row["id"]),
                "series": keys[row["series"]],
                "metric": row["metric"],
                "state": row["state"],
                "lifecycle": state,
                "kind": kind,
                "start": start,
                "end": max(end, start),
                "accepted": max(end, start) if kind == "baseline" else None,
                "text": f"incident #{int(row['id'])} · {state}",
                "detail": _hover(row),
            }
        )
    return out


def _kind(row: Mapping[str, Any]) -> str:
    """How an incident is drawn: open (red), acknowledged (someone is on it), baseline (its
    change accepted as the new level) or resolved (recovered, by hand, or its rule removed)."""
    if row.get("state") != "resolved":
        return "acknowledged" if _filled(row.get("acknowledged_at")) else "open"
    return "baseline" if row.get("resolution") == "baseline" else "resolved"


def _hover(row: Mapping[str, Any]) -> str:
    """The incident's detail, then its lifecycle's words: acknowledged (when, the note), the
    resolution's note, the maintenance window it opened in."""
    parts = [str(row["detail"])] if _filled(row.get("detail")) else []
    if _filled(row.get("acknowledged_at")):
        note = f": {row['acknowledged_note']}" if _filled(row.get("acknowledged_note")) else ""
        when = str(row["acknowledged_at"])[:16].replace("T", " ")
        parts.append(f"acknowledged {when} UTC{note}")
    if _filled(row.get("note")):
        parts.append(f"note: {row['note']}")
    if _filled(row.get("maintenance")):
        parts.append(f"in maintenance: {row['maintenance']} (alerts silenced)")
    return "; ".join(parts)


def _filled(value: Any) -> bool:
    return bool(_text(value))


def bands(
    windows: Iterable[Window],
    shown: Mapping[str, Series],
    start: pd.Timestamp,
    end: pd.Timestamp,
) -> list[dict[str, Any]]:
    """The maintenance windows to shade (docs/alerts.md#maintenance): each one (the
    configuration's and the store's alike) that covers a series shown (`shown`: key ->
    `Series`) and overlaps the axis, clipped to it, with its reason and which series it covers."""
    out = []
    for window in windows:
        covered = [s.label for s in shown.values() if window.selector.matches(s)]
        begins, ends = _utc(window.start), _utc(window.end)
        if not covered or ends <= start or begins >= end:
            continue
        out.append(
            {
                "start": max(begins, start),
                "end": min(ends, end),
                "text": f"maintenance: {window.reason}",
                "detail": f"{window.describe()}; covers {', '.join(covered)}; "
                + _source(window.source),
            }
        )
    return out


def placed(
    marks: Iterable[dict[str, Any]], axis: tuple[pd.Timestamp, pd.Timestamp]
) -> list[dict[str, Any]]:
    """The spans or bands that reach into the `axis` (`rtax.analysis.timeline.x_range`), each
    with where its label goes: ``label_at``, its start or the axis' start when it began before
    it, and ``anchor``, the label's edge at that point (``left``: the text reads on to the
    right; ``right`` in the axis' last fifth, where such a text would run off the chart)."""
    start, end = axis
    out = []
    for mark in marks:
        if mark["end"] < start:
            continue
        at = max(mark["start"], start)
        anchor = "right" if at > start + (end - start) * 0.8 else "left"
        out.append({**mark, "label_at": at, "anchor": anchor})
    return out


def _source(source: str) -> str:
    """Where a window was written: the configuration, or the store (``rtax maintenance add``)."""
    return "from [[maintenance]]" if source == "config" else f"rtax maintenance add {source}"


#: The incidents table below the chart: a view of incident rows (the store's
#: ``INCIDENT_COLUMNS``), with before and after split by unit, so a column holds one unit, and
#: the lifecycle: its state as a person reads it (`incidents.state_of`), why it was resolved,
#: the note (the resolution's, else the acknowledgement's) and the maintenance window it
#: opened in (docs/alerts.md#lifecycle).
INCIDENT_TABLE_COLUMNS = (
    "id", "series", "metric", "state", "start", "end",
    "before_p50_s", "after_p50_s", "before_rate", "after_rate", "magnitude", "detail",
    "resolution", "note", "maintenance",
)  # fmt: skip


def incident_table(spans_shown: list[dict[str, Any]], incidents: pd.DataFrame) -> pd.DataFrame:
    """The incidents drawn (`spans`), newest first, with their before/after p50 from the
    incident rows: in seconds for a latency metric, as a share for the success rate (two
    columns each, so a column holds one unit); `end` blank while open; then the lifecycle."""
    if not spans_shown:
        return pd.DataFrame(columns=list(INCIDENT_TABLE_COLUMNS))
    details = incidents.set_index("id")
    rows = []
    for span in spans_shown:
        found = details.loc[span["id"]] if span["id"] in details.index else {}
        is_rate = span["metric"] == "success_rate"
        before, after = found.get("before_p50"), found.get("after_p50")
        note = _text(found.get("note"))
        if not note and _text(found.get("acknowledged_note")):
            note = f"acknowledged: {found.get('acknowledged_note')}"
        rows.append(
            {
                **{k: span[k] for k in ("id", "series", "metric", "start")},
                "state": span.get("lifecycle", span["state"]),
                "end": span["end"] if span["state"] == "resolved" else pd.NaT,
                "before_p50_s": None if is_rate else before,
                "after_p50_s": None if is_rate else after,
                "before_rate": before if is_rate else None,
                "after_rate": after if is_rate else None,
                "magnitude": found.get("magnitude"),
                "detail": found.get("detail"),
                "resolution": _text(found.get("resolution")) or None,
                "note": note or None,
                "maintenance": _text(found.get("maintenance")) or None,
            }
        )
    frame = pd.DataFrame(rows, columns=list(INCIDENT_TABLE_COLUMNS))
    return frame.sort_values("id", ascending=False).reset_index(drop=True)


def _text(value: Any) -> str:
    return value if isinstance(value, str) else ""


def _utc(text: Any) -> pd.Timestamp:
    moment = pd.Timestamp(text)
    return moment.tz_localize("UTC") if moment.tzinfo is None else moment.tz_convert("UTC")
