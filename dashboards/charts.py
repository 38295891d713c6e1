"""Altair charts for the pages (no Streamlit here). Each takes a polars frame the queries return and
names its units on the axes; the page puts a one-line caption under each."""

from __future__ import annotations

import altair as alt
import polars as pl

# The heatmap and the hourly series of a 1,024-GPU week pass Altair's 5,000-row guard; the frames
# are already cut to what is drawn (heatmap_devices), so the guard would only get in the way.
alt.data_transformers.disable_max_rows()

STATE_COLORS = {"held, idle": "#d62728", "held, no data": "#ff9896", "held, busy": "#2ca02c", "free": "#e8e8e8"}
STATUS_COLORS = {"funded": "#2ca02c", "at-risk": "#ff7f0e", "exhausted": "#d62728"}


def pct_over_time(frame: pl.DataFrame, color: str | None, title: str) -> alt.Chart:
    """Lines of ``pct`` (0..100 % of capacity) per hour; dashed = active, solid = allocated."""
    enc = {
        "x": alt.X("hour:T", title="hour (UTC)"),
        "y": alt.Y("pct:Q", title="% of installed capacity", scale=alt.Scale(domain=[0, 100])),
        "strokeDash": alt.StrokeDash("measure:N", title="measure", sort=["allocated", "active"]),
        "tooltip": [alt.Tooltip("hour:T", format="%Y-%m-%d %H:00"), "measure:N",
                    alt.Tooltip("pct:Q", format=".1f", title="%")],
    }
    if color:
        enc["color"] = alt.Color(f"{color}:N", title=color)
        enc["tooltip"].insert(1, f"{color}:N")
    return alt.Chart(frame, title=title).mark_line().encode(**enc).properties(height=260)


def stacked_hours(frame: pl.DataFrame, value: str, color: str, title: str, y_title: str) -> alt.Chart:
    return alt.Chart(frame, title=title).mark_area().encode(
        x=alt.X("hour:T", title="hour (UTC)"),
        y=alt.Y(f"{value}:Q", title=y_title, stack=True),
        color=alt.Color(f"{color}:N", title=color),
        tooltip=[alt.Tooltip("hour:T", format="%Y-%m-%d %H:00"), f"{color}:N", alt.Tooltip(f"{value}:Q", format=".2f")],
    ).properties(height=240)


def device_heatmap(frame: pl.DataFrame, title: str) -> alt.Chart:
    domain = list(STATE_COLORS)
    cells = frame.with_columns(hour_end=pl.col("hour") + pl.duration(hours=1))
    return alt.Chart(cells, title=title).mark_rect().encode(
        x=alt.X("hour:T", title="hour (UTC)"),
        x2="hour_end:T",
        y=alt.Y("device:N", title="device (cluster/host/GPU)", sort=None),
        color=alt.Color("state:N", title="state", scale=alt.Scale(domain=domain, range=[STATE_COLORS[d] for d in domain])),
        tooltip=["device:N", alt.Tooltip("hour:T", format="%Y-%m-%d %H:00"), "state:N",
                 alt.Tooltip("activity_ratio:Q", format=".0%", title="activity"),
                 alt.Tooltip("held_fraction:Q", format=".0%", title="held")],
    ).properties(height=alt.Step(16))


def ratio_over_time(frame: pl.DataFrame, value: str, title: str, y_title: str) -> alt.Chart:
    base = alt.Chart(frame, title=title).mark_line(point=True).encode(
        x=alt.X("as_of:T", title="snapshot (UTC)"),
        y=alt.Y(f"{value}:Q", title=y_title, axis=alt.Axis(format="%")),
        color=alt.Color("node:N", title="project"),
        tooltip=["node:N", alt.Tooltip("as_of:T", format="%Y-%m-%d %H:%M"), alt.Tooltip(f"{value}:Q", format=".1%")],
    ).properties(height=260)
    rule = alt.Chart(pl.DataFrame({"y": [1.0]})).mark_rule(strokeDash=[4, 4], color="gray").encode(y="y:Q")
    return base + rule


def budget_vs_consumed(frame: pl.DataFrame, title: str) -> alt.Chart:
    """Consumed as % of each node's budget (a bar per node, coloured by status); budgets differ by
    orders of magnitude, so side-by-side absolute bars would hide the small nodes."""
    data = frame.filter(pl.col("budget_gpu_hours") > 0).with_columns(
        consumed_pct=100 * pl.col("consumed_gpu_hours") / pl.col("budget_gpu_hours"))
    domain = list(STATUS_COLORS)
    return alt.Chart(data, title=title).mark_bar().encode(
        y=alt.Y("node:N", title="org node", sort=None),
        x=alt.X("consumed_pct:Q", title="consumed (% of the period's budget)"),
        color=alt.Color("status:N", title="status", scale=alt.Scale(domain=domain, range=[STATUS_COLORS[d] for d in domain])),
        tooltip=["node:N", "status:N", alt.Tooltip("consumed_pct:Q", format=".1f", title="consumed %"),
                 alt.Tooltip("consumed_gpu_hours:Q", format=",.1f", title="consumed (norm. GPU-h)"),
                 alt.Tooltip("budget_gpu_hours:Q", format=",.1f", title="budget (norm. GPU-h)")],
    ).properties(height=max(24 * data.height, 120))


def burn_down(history: pl.DataFrame, projection: pl.DataFrame, budget: float, title: str) -> alt.Chart:
    """Remaining budget per snapshot (solid), the projection to exhaustion at the 7-day burn rate
    (dashed) and zero."""
    actual = alt.Chart(history).mark_line(point=True).encode(
        x=alt.X("as_of:T", title="date (UTC)"),
        y=alt.Y("remaining_gpu_hours:Q", title="remaining budget (normalised GPU-hours)",
                scale=alt.Scale(domain=[0, max(budget, 1.0)])),
        tooltip=[alt.Tooltip("as_of:T", format="%Y-%m-%d %H:%M"), alt.Tooltip("remaining_gpu_hours:Q", format=",.1f"),
                 "status:N"])
    projected = alt.Chart(projection).mark_line(strokeDash=[6, 4], color="#ff7f0e").encode(
        x="as_of:T", y="remaining_gpu_hours:Q",
        tooltip=[alt.Tooltip("as_of:T", format="%Y-%m-%d %H:%M", title="projected"),
                 alt.Tooltip("remaining_gpu_hours:Q", format=",.1f")])
    return (actual + projected).properties(title=title, height=260)


def amount_bars(frame: pl.DataFrame, title: str, currency: str) -> alt.Chart:
    return alt.Chart(frame, title=title).mark_bar().encode(
        y=alt.Y("label:N", title="", sort="-x", axis=alt.Axis(labelOverlap=False, labelLimit=220)),
        x=alt.X("amount:Q", title=f"amount ({currency})"),
        color=alt.Color("line_kind:N", title="line"),
        tooltip=["label:N", "line_kind:N", alt.Tooltip("amount:Q", format=",.2f"), alt.Tooltip("gpu_hours:Q", format=",.2f")],
    ).properties(height=max(30 * frame.height, 120))



def whatif_delivery(frame: pl.DataFrame, title: str) -> alt.Chart:
    """Delivered ÷ owed per project, a bar per policy side by side, and the 100 % line."""
    bars = alt.Chart(frame).mark_bar().encode(
        y=alt.Y("project:N", title="project", sort=None),
        yOffset=alt.YOffset("policy:N", sort=None),
        x=alt.X("delivery_ratio:Q", title="delivered ÷ owed GPU-hours", axis=alt.Axis(format="%")),
        color=alt.Color("policy:N", title="policy", sort=None),
        tooltip=["project:N", "policy:N", alt.Tooltip("delivery_ratio:Q", format=".1%", title="delivered ÷ owed"),
                 alt.Tooltip("owed_gpu_hours:Q", format=",.1f", title="owed (GPU-h)"),
                 alt.Tooltip("delivered_gpu_hours:Q", format=",.1f", title="delivered (GPU-h)")])
    rule = alt.Chart(pl.DataFrame({"x": [1.0]})).mark_rule(strokeDash=[4, 4], color="gray").encode(x="x:Q")
    projects = frame["project"].n_unique() if frame.height else 1
    return (bars + rule).properties(title=title, height=max(18 * frame.height, 40 * projects, 120))


def whatif_waits(frame: pl.DataFrame, title: str) -> alt.Chart:
    """Wait p90 (bars) and p50 (black ticks) in hours per job class, a bar per policy."""
    enc = {"x": alt.X("job_class:N", title="job class", sort=["small", "medium", "large"]),
           "xOffset": alt.XOffset("policy:N", sort=None)}
    tooltip = ["job_class:N", "policy:N", alt.Tooltip("wait_p50_hours:Q", format=".2f", title="p50 (h)"),
               alt.Tooltip("wait_p90_hours:Q", format=".2f", title="p90 (h)"), alt.Tooltip("jobs:Q", title="jobs")]
    p90 = alt.Chart(frame).mark_bar().encode(
        **enc, y=alt.Y("wait_p90_hours:Q", title="wait (hours)"),
        color=alt.Color("policy:N", title="policy", sort=None), tooltip=tooltip)
    p50 = alt.Chart(frame).mark_tick(color="black", thickness=2).encode(**enc, y="wait_p50_hours:Q", tooltip=tooltip)
    return (p90 + p50).properties(title=title, height=260)


def whatif_sweep(frame: pl.DataFrame, parameter: str, title: str) -> alt.Chart:
    """The worst project's and all projects' delivered ÷ owed per swept value."""
    data = frame.select(pl.col("value").cast(pl.Utf8),
                        pl.col("worst_delivery_ratio").cast(pl.Float64).alias("worst project"),
                        pl.col("delivery_ratio").cast(pl.Float64).alias("all projects")).unpivot(
        index="value", variable_name="measure", value_name="ratio")
    return alt.Chart(data, title=title).mark_line(point=True).encode(
        x=alt.X("value:N", title=parameter, sort=None),
        y=alt.Y("ratio:Q", title="delivered ÷ owed GPU-hours", axis=alt.Axis(format="%")),
        color=alt.Color("measure:N", title=""),
        tooltip=["value:N", "measure:N", alt.Tooltip("ratio:Q", format=".1%")]).properties(height=260)
