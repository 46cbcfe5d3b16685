"""Plotly figures for the pages, built from run frames and the tables of `tables`.

Why summaries rather than raw points: a page must render in about a second over 100,000 runs,
and shipping every sample to the browser would not. So box plots get their quartiles and
whiskers computed here from all samples (Tukey: 1.5 IQR, clipped to the data), and an ECDF is
drawn through at most `ECDF_POINTS` of its n steps; titles and legends carry `n`.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import plotly.graph_objects as go

from rtax.analysis.stats import percentile, successful
from rtax.core.record import PHASE_COLUMNS
from rtax.dashboard.format import hours, rate
from rtax.planning import published

ECDF_POINTS = 400
PHASE_COLORS = {
    "create_s": "#4C78A8",
    "orchestration_s": "#F58518",
    "ready_s": "#E45756",
    "claim_s": "#EECA3B",
    "restore_s": "#FF9DA6",
    "resume_s": "#BAB0AC",
    "setup_s": "#72B7B2",
    "actions_s": "#54A24B",
    "cleanup_s": "#B279A2",
    "overhead_s": "#9D755D",
}


def _values(runs: pd.DataFrame, series: str, metric: str) -> np.ndarray:
    ok = successful(runs[runs["series"] == series])
    arr = ok[metric].to_numpy(dtype=float)
    return np.sort(arr[np.isfinite(arr)])


def box(runs: pd.DataFrame, metric: str, title: str, log: bool = False) -> go.Figure:
    """One box per series (successful runs), quartiles computed from every sample."""
    fig = go.Figure()
    for series in sorted(runs["series"].unique()):
        v = _values(runs, series, metric)
        if v.size == 0:
            continue
        q1, med, q3 = (percentile(v, q) for q in (25, 50, 75))  # the one percentile rule
        iqr = q3 - q1
        low = v[v >= q1 - 1.5 * iqr].min()
        high = v[v <= q3 + 1.5 * iqr].max()
        fig.add_trace(
            go.Box(
                name=f"{series} (n={v.size})",
                q1=[q1],
                median=[med],
                q3=[q3],
                lowerfence=[low],
                upperfence=[high],
                mean=[v.mean()],
                boxpoints=False,
                x=[series],
            )
        )
    fig.update_layout(
        title=title,
        yaxis_title="seconds",
        showlegend=True,
        height=420,
        yaxis_type="log" if log else "linear",
    )
    return fig


def ecdf(runs: pd.DataFrame, metric: str, title: str, log: bool = False) -> go.Figure:
    """Empirical CDF per series through at most `ECDF_POINTS` quantiles of all samples."""
    fig = go.Figure()
    for series in sorted(runs["series"].unique()):
        v = _values(runs, series, metric)
        if v.size == 0:
            continue
        # The step function F(x) = k/n at the k-th smallest sample, through at most
        # ECDF_POINTS of the n steps (always including the first and the last).
        k = np.unique(np.linspace(1, v.size, min(v.size, ECDF_POINTS)).round().astype(int))
        fig.add_trace(
            go.Scatter(
                x=v[k - 1],
                y=k / v.size,
                mode="lines",
                line_shape="hv",
                name=f"{series} (n={v.size})",
            )
        )
    fig.update_layout(
        title=title,
        xaxis_title="seconds",
        yaxis_title="fraction of runs ≤ x",
        height=420,
        xaxis_type="log" if log else "linear",
    )
    return fig


def decomposition(means: pd.DataFrame, milestones: pd.DataFrame) -> go.Figure:
    """Stacked mean phase times per series x workload; hovering shows n and native milestones.
    `means` is `stats.phase_means(runs, by=("series", "workload"))`."""
    labels = [f"{r.series} · {r.workload}" for r in means.itertuples(index=False)]
    hover = []
    for r in means.itertuples(index=False):
        ms = milestones[(milestones["series"] == r.series) & (milestones["workload"] == r.workload)]
        lines = [
            f"{m.milestone}: +{m.mean_t_s * 1e3:.1f} ms"
            for m in ms.sort_values("mean_t_s").itertuples(index=False)
        ]
        hover.append(
            f"n={r.n}<br>milestones (mean offset from create):<br>"
            + ("<br>".join(lines) if lines else "none recorded")
        )
    fig = go.Figure()
    for column in PHASE_COLUMNS:
        fig.add_trace(
            go.Bar(
                name=column.removesuffix("_s"),
                x=labels,
                y=means[column],
                customdata=hover,
                marker_color=PHASE_COLORS[column],
                hovertemplate="%{x}<br>"
                + column.removesuffix("_s")
                + ": %{y:.4f} s (mean)<br>%{customdata}<extra></extra>",
            )
        )
    fig.update_layout(
        barmode="stack",
        height=460,
        yaxis_title="seconds (mean)",
        title="Mean time per phase (means: percentiles don't add up)",
    )
    return fig


def amortization(
    points: pd.DataFrame, fit_table: pd.DataFrame, overlay: bool, which: str
) -> tuple[go.Figure, go.Figure]:
    """Trajectory time and amortized per-action latency against S, with fitted lines and,
    when `overlay`, the published reference points (labelled as published)."""
    time_fig, per_fig = go.Figure(), go.Figure()
    top = max([150, *points["steps"].tolist()]) if not points.empty else 150
    s_axis = np.linspace(1, top * 1.05, 60)
    for series in sorted(points["series"].unique()):
        p = points[points["series"] == series]
        text = [f"n={n}" for n in p["n"]]
        time_fig.add_trace(
            go.Scatter(
                x=p["steps"], y=p["seconds"], mode="markers", name=f"{series} {which}", text=text
            )
        )
        per_fig.add_trace(
            go.Scatter(
                x=p["steps"],
                y=p["per_action_s"],
                mode="lines+markers",
                name=f"{series} {which}",
                text=text,
            )
        )
    for r in fit_table.dropna(subset=["fixed_s"]).itertuples(index=False):
        y = r.fixed_s + r.per_action_s * s_axis
        time_fig.add_trace(
            go.Scatter(
                x=s_axis,
                y=y,
                mode="lines",
                line_dash="dot",
                name=f"{r.series} fit: {r.fixed_s:.2f} s + S × {r.per_action_s * 1e3:.1f} ms",
            )
        )
        per_fig.add_trace(
            go.Scatter(
                x=s_axis, y=y / s_axis, mode="lines", line_dash="dot", name=f"{r.series} fit / S"
            )
        )
    if overlay:
        for p in published.TRAJECTORY_POINTS:
            label = f"published: {p.substrate}"
            time_fig.add_trace(
                go.Scatter(
                    x=[p.steps],
                    y=[p.seconds],
                    mode="markers+text",
                    marker_symbol="x",
                    name=label,
                    text=[p.substrate],
                    textposition="top center",
                )
            )
            per_fig.add_trace(
                go.Scatter(
                    x=[p.steps],
                    y=[p.seconds / p.steps],
                    mode="markers",
                    marker_symbol="x",
                    name=label,
                )
            )
    time_fig.update_layout(
        title="Trajectory completion time T(S)",
        xaxis_title="actions (S)",
        yaxis_title="seconds",
        height=440,
    )
    per_fig.update_layout(
        title="Amortized per-action latency T(S) / S",
        xaxis_title="actions (S)",
        yaxis_title="seconds per action",
        yaxis_type="log",
        height=440,
    )
    return time_fig, per_fig


def projection_bars(table: pd.DataFrame, title: str) -> go.Figure:
    fig = go.Figure(
        go.Bar(
            x=table["substrate"],
            y=table["worker_hours"],
            text=[hours(h) for h in table["worker_hours"]],
            textposition="outside",
        )
    )
    fig.update_layout(title=title, yaxis_title="worker-hours", height=400)
    return fig


#: Incident spans by how they are drawn (`rtax.analysis.overlays.spans`' ``kind``): open red,
#: acknowledged orange (someone is on it), accepted as the new baseline violet, resolved grey.
INCIDENT_COLORS = {
    "open": "#d62728",
    "acknowledged": "#ff7f0e",
    "baseline": "#6a3d9a",
    "resolved": "#7f7f7f",
}
#: Maintenance windows: a pale band under everything else.
MAINTENANCE_COLOR = "#9ecae1"


#: One colour per series on the Timeline, in order.
_PALETTE = (
    "#1f77b4", "#ff7f0e", "#2ca02c", "#9467bd", "#8c564b", "#e377c2", "#17becf", "#bcbd22",
)  # fmt: skip


def timeline(
    points: pd.DataFrame,
    spans: list[dict],
    metric: str,
    bands: list[dict] | None = None,
    x_range: tuple[pd.Timestamp, pd.Timestamp] | None = None,
) -> go.Figure:
    """p50 (solid), p95 (dashed) and p99 (dotted, where n allows) per series over time, one
    legend entry each, success rate below with failed buckets marked (red x); incidents as
    shaded spans from their change point (a dotted line) to their end, a baseline's acceptance
    marked; maintenance windows (`bands`) as pale bands; the x axis over `x_range` (the window
    in view). Hover gives the bucket, `n`, the source of each point and a tail's interval."""
    from plotly.subplots import make_subplots

    fig = make_subplots(
        rows=2, cols=1, shared_xaxes=True, row_heights=[0.7, 0.3], vertical_spacing=0.06
    )
    for i, (series, group) in enumerate(points.groupby("series", sort=True)):
        _timeline_series(
            fig, series, group.sort_values("bucket_start"), _PALETTE[i % len(_PALETTE)]
        )
    for band in bands or []:
        _maintenance_band(fig, band)
    for span in spans:
        _incident_span(fig, span)
    fig.update_yaxes(type="log", title_text=f"{metric} (s, log)", row=1, col=1)
    fig.update_yaxes(title_text="success", tickformat=".0%", range=[-0.05, 1.05], row=2, col=1)
    if x_range is not None:  # as the points are sent: UTC without an offset
        fig.update_xaxes(range=[_wall(x_range[0]), _wall(x_range[1])])
    fig.update_layout(
        height=560, margin={"t": 30, "b": 30}, hovermode="closest", legend={"orientation": "h"}
    )
    return fig


def _timeline_series(fig: go.Figure, series: str, group: pd.DataFrame, color: str) -> None:
    """One series' traces: p50, p95 and (where n allows) p99 above, one legend entry toggling
    them all, the tails' 95 % intervals in their hover; success and its failed buckets below."""
    custom = np.column_stack(
        [
            group["bucket_end"].astype(str),
            group["n"],
            group["runs"],
            group["source"],
            group["errors"].replace("", "none"),
        ]
    )
    when = "%{x|%Y-%m-%d %H:%M} → %{customdata[0]|%H:%M} UTC"
    for q, dash in (("p50", "solid"), ("p95", "dash"), ("p99", "dot")):
        if q != "p50" and (q not in group or group[q].isna().all()):
            continue  # p99 is drawn only where some bucket's n allows it (stats.shown)
        bounds = [
            _interval_text(lo, hi)
            for lo, hi in zip(
                group.get(f"{q}_lo", np.full(len(group), np.nan)),
                group.get(f"{q}_hi", np.full(len(group), np.nan)),
                strict=True,
            )
        ]
        fig.add_trace(
            go.Scatter(
                x=group["bucket_start"],
                y=group[q],
                mode="lines+markers",
                name=series if q == "p50" else f"{series} {q}",
                legendgroup=series,
                showlegend=q == "p50",
                line={"color": color, "dash": dash, "width": 1.5 if q != "p99" else 1},
                marker={"size": 4 if q != "p99" else 3},
                customdata=np.column_stack([custom, bounds]),
                hovertemplate=f"<b>{series}</b><br>{when}<br>{q} %{{y:.4g}} s"
                "%{customdata[5]} (n=%{customdata[1]})<br>%{customdata[3]}<extra></extra>",
            ),
            row=1,
            col=1,
        )
    fig.add_trace(
        go.Scatter(
            x=group["bucket_start"],
            y=group["success_rate"],
            mode="lines",
            name=f"{series} success",
            legendgroup=series,
            showlegend=False,
            line={"color": color, "width": 1},
            customdata=custom,
            hovertemplate=f"<b>{series}</b><br>{when}<br>success %{{y:.0%}} of "
            "%{customdata[2]} rollouts<br>failures: %{customdata[4]}<extra></extra>",
        ),
        row=2,
        col=1,
    )
    failed = group[group["failures"] > 0]
    if not failed.empty:
        fig.add_trace(
            go.Scatter(
                x=failed["bucket_start"],
                y=failed["success_rate"],
                mode="markers",
                name=f"{series} failures",
                legendgroup=series,
                showlegend=False,
                marker={"symbol": "x", "color": "#d62728", "size": 8},
                customdata=np.column_stack([failed["failures"], failed["errors"]]),
                hovertemplate=f"<b>{series}</b><br>%{{x|%Y-%m-%d %H:%M}} UTC<br>"
                "%{customdata[0]} failed: %{customdata[1]}<extra></extra>",
            ),
            row=2,
            col=1,
        )


def _interval_text(lo: float, hi: float) -> str:
    """A tail point's 95 % interval for its hover (docs/measurement.md#tails), or nothing where
    the bucket's samples can't bound it."""
    if not (np.isfinite(lo) and np.isfinite(hi)):
        return ""
    return f" [95 % interval {lo:.4g}–{hi:.4g} s]"


def _incident_span(fig: go.Figure, span: dict) -> None:
    """An incident: a shaded span from its change point (a dotted line) to its end, labelled
    with its lifecycle state (where `rtax.analysis.overlays.placed` put it); one accepted as
    the new baseline also gets a solid line and a label where its new level was accepted."""
    color = INCIDENT_COLORS.get(span.get("kind", span["state"]), "#7f7f7f")
    fig.add_vrect(
        x0=_wall(span["start"]), x1=_wall(span["end"]), fillcolor=color, opacity=0.12,
        line_width=0, row="all", col=1,
    )  # fmt: skip
    fig.add_vline(x=_wall(span["start"]), line={"color": color, "dash": "dot", "width": 1}, row=1)
    hover = f"{span['series']}: {span['metric']}. {span['detail']}"
    at, anchor = span.get("label_at", span["start"]), span.get("anchor", "left")
    _label(fig, at, 1.0, span["text"], color, hover, anchor)
    if span.get("accepted") is not None:
        fig.add_vline(x=_wall(span["accepted"]), line={"color": color, "width": 2}, row=1)
        text = f"#{span['id']} accepted as the new baseline"
        _label(fig, span["accepted"], 0.9, text, color, hover, "right")


def _maintenance_band(fig: go.Figure, band: dict) -> None:
    """A maintenance window: a pale band over both rows, its reason at the foot of the chart."""
    fig.add_vrect(
        x0=_wall(band["start"]), x1=_wall(band["end"]), fillcolor=MAINTENANCE_COLOR,
        opacity=0.3, line_width=0, layer="below", row="all", col=1,
    )  # fmt: skip
    at, anchor = band.get("label_at", band["start"]), band.get("anchor", "left")
    _label(fig, at, 0.0, band["text"], "#3182bd", band["detail"], anchor, "bottom")


def _wall(moment: pd.Timestamp) -> pd.Timestamp:
    """`moment` as UTC wall time, the form pandas sends a column of points in (Plotly reads
    dates as wall times and would ignore an offset anyway)."""
    moment = pd.Timestamp(moment)
    return moment.tz_convert("UTC").tz_localize(None) if moment.tzinfo else moment


def _label(
    fig: go.Figure,
    x: pd.Timestamp,
    y: float,
    text: str,
    color: str,
    hover: str,
    xanchor: str,
    yanchor: str = "top",
) -> None:
    """A text on the upper chart at `x` and the height `y` of its domain (0 bottom, 1 top)."""
    fig.add_annotation(
        x=_wall(x), y=y, yref="y domain", text=text, showarrow=False, xanchor=xanchor,
        yanchor=yanchor, font={"color": color, "size": 11}, hovertext=hover,
    )  # fmt: skip


def budgets(table: pd.DataFrame) -> go.Figure:
    """The error budget left of each series and objective (`rtax.analysis.slo.table`'s rows) as
    horizontal bars: green with a quarter or more left, orange below, red once overspent;
    a series without an event in its period has no bar."""
    shown = table.dropna(subset=["budget_left_share"])
    left = shown["budget_left_share"].astype(float)
    colors = ["#d62728" if v < 0 else "#ff7f0e" if v < 0.25 else "#2ca02c" for v in left]
    fig = go.Figure(
        go.Bar(
            x=left,
            y=[f"{s} · {o}" for s, o in zip(shown["series"], shown["objective"], strict=True)],
            orientation="h",
            marker_color=colors,
            text=[rate(v) for v in left],
            textposition="auto",
            hovertext=[
                f"{b:,} of {e:,} bad, {a:.3g} allowed over {p}"
                for b, e, a, p in zip(
                    shown["bad"], shown["events"], shown["allowed"], shown["period"], strict=True
                )
            ],
        )
    )
    fig.update_xaxes(title_text="error budget left", tickformat=".0%", zeroline=True)
    fig.update_yaxes(autorange="reversed")  # in the table's order, top down
    fig.update_layout(height=80 + 32 * len(shown), margin={"t": 10, "b": 40}, showlegend=False)
    return fig
