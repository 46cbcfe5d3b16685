"""The Capacity page's tables and Plotly figures, from load runs and the envelope fit.

Why apart from `figures` (docs/load.md#reading-the-capacity-page): the page shows four things
that belong together, each built from `rtax.analysis.envelope`'s pure tables: TTFC p50/p95 against
concurrency with `n` and the bound, the launch-order profile of one run, the envelope, and the
client's own CPU and dispatch lag so that a saturated client is seen before its figures are
believed. Series are labelled as everywhere (mode and fidelity marked), never merged.
"""

from __future__ import annotations

import json

import pandas as pd
import plotly.graph_objects as go

from rtax.analysis import envelope
from rtax.core.series import series_name, workload_name

#: The load runs table's columns, in order (what the page shows of `load_runs`).
LOAD_COLUMNS: tuple[str, ...] = (
    "started_at",
    "series",
    "shape",
    "n",
    "every_s",
    "status",
    "rollouts",
    "ok",
    "concurrency",
    "creates_per_s",
    "time_to_first_ready_s",
    "time_to_all_ready_s",
    "failures",
    "rate_limit_waits",
    "harness_cpu_cores",
    "dispatch_lag_p50_s",
    "dispatch_lag_max_s",
    "client",
    "load_id",
)


def labelled(frame: pd.DataFrame) -> pd.DataFrame:
    """`frame` with a `series` column: substrate · mode [fidelity], then the workload (a load
    run's series: `rtax.analysis.envelope.SERIES`)."""
    out = frame.copy()
    out["series"] = [
        f"{series_name(s, m, f)} {workload_name(t, k)}"
        for s, m, f, t, k in zip(
            out["substrate"], out["mode"], out["fidelity"], out["tier"], out["steps"], strict=True
        )
    ]
    return out


def load_table(loads: pd.DataFrame, points: pd.DataFrame) -> pd.DataFrame:
    """The load runs, newest first, with the client verdict of each (`envelope.saturation`
    against its series' TTFC p50 at that concurrency)."""
    if loads.empty:
        return pd.DataFrame(columns=list(LOAD_COLUMNS))
    p50 = {}
    for row in points.to_dict("records"):
        p50[(*(row[k] for k in envelope.SERIES), row["concurrency"])] = row["ttfc_p50_s"]
    out = labelled(loads)
    out["client"] = [
        envelope.saturation(
            r["harness_cpu_cores"],
            r["dispatch_lag_p50_s"],
            p50.get((*(r[k] for k in envelope.SERIES), r["concurrency"]), float("nan")),
        )
        or "ok"
        for r in out.to_dict("records")
    ]
    out["failures"] = [
        ", ".join(f"{n} {k}" for k, n in json.loads(f).items()) if isinstance(f, str) else ""
        for f in out["failures"]
    ]
    return out.sort_values("started_at", ascending=False)[list(LOAD_COLUMNS)]


def run_names(listed: pd.DataFrame) -> dict[str, str]:
    """load_id -> a label, for choosing a run's launch-order profile: staggered runs first
    (their profile is the point), newest first within each shape group."""
    order = listed.assign(rank=(listed["shape"] != "staggered").astype(int))
    order = order.sort_values(["rank", "started_at"], ascending=[True, False])
    return {
        r["load_id"]: f"{r['series']}: {r['shape']} of {r['n']}, {str(r['started_at'])[:19]}"
        for r in order.to_dict("records")
    }


def ttfc_against_concurrency(points: pd.DataFrame, fitted: pd.DataFrame) -> go.Figure:
    """TTFC p50 (solid) and p95 (dashed) per series against concurrency, `n` at each point,
    the p95 bound of each series as a dotted line and its first break as a cross."""
    fig = go.Figure()
    table = labelled(points) if not points.empty else points
    bounds = labelled(fitted).set_index("series") if not fitted.empty else fitted
    for series in sorted(table["series"].unique()) if not table.empty else []:
        mine = table[table["series"] == series].sort_values("concurrency")
        text = [f"n={n}" for n in mine["n"]]
        for q, dash in (("p50", "solid"), ("p95", "dash")):
            fig.add_trace(
                go.Scatter(
                    x=mine["concurrency"],
                    y=mine[f"ttfc_{q}_s"],
                    mode="lines+markers+text" if q == "p95" else "lines+markers",
                    text=text if q == "p95" else None,
                    textposition="top center",
                    name=f"{series} {q}",
                    line={"dash": dash},
                )
            )
        if series in bounds.index:
            fit = bounds.loc[series]
            limit = fit["p95_limit_s"]
            if pd.notna(limit):
                fig.add_trace(
                    go.Scatter(
                        x=[mine["concurrency"].min(), mine["concurrency"].max()],
                        y=[limit, limit],
                        mode="lines",
                        line={"dash": "dot"},
                        name=f"{series} p95 bound",
                    )
                )
            if pd.notna(fit["break_concurrency"]):
                at = mine[mine["concurrency"] == fit["break_concurrency"]]
                fig.add_trace(
                    go.Scatter(
                        x=at["concurrency"],
                        y=at["ttfc_p95_s"],
                        mode="markers",
                        marker={"symbol": "x", "size": 14},
                        name=f"{series} breaks: {fit['broken_by']}",
                    )
                )
    fig.update_layout(
        title="Time to first command against concurrency (successful rollouts; n at p95)",
        xaxis_title="concurrency (most rollouts in flight at once)",
        yaxis_title="seconds",
        height=460,
    )
    return fig


def launch_profile(rollouts: pd.DataFrame, title: str) -> go.Figure:
    """TTFC of each launch of one load run against its launch index; a failed launch is a
    cross at the bottom, named by its error class."""
    fig = go.Figure()
    ok = rollouts[rollouts["status"] == "ok"]
    fig.add_trace(
        go.Scatter(
            x=ok["load_index"],
            y=ok["time_to_first_command_s"],
            mode="lines+markers",
            name=f"time to first command (n={len(ok)})",
        )
    )
    failed = rollouts[rollouts["status"] != "ok"]
    if not failed.empty:
        fig.add_trace(
            go.Scatter(
                x=failed["load_index"],
                y=[0.0] * len(failed),
                mode="markers",
                marker={"symbol": "x", "size": 12},
                text=failed["error_class"],
                name=f"failed (n={len(failed)})",
            )
        )
    fig.update_layout(title=title, xaxis_title="launch index", yaxis_title="seconds", height=380)
    return fig
