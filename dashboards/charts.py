"""Altair charts for the pages (no Streamlit here): one home for how a chart is sized, titled and
labelled, so every page's charts read the same from 1 row to hundreds.

The rules every builder follows (``finish`` applies the shared ones):

* the plot area's height comes from the row count (``plot_height``): a bar or heatmap row is
  ``ROW_PX`` high, never less than ``MIN_PLOT_PX`` in all; and the chart grows around its plot
  area (``autosize fit-x``): Streamlit's theme uses ``fit``, which squeezes the plot to make room for
  the title, axes and legend (a 1-px plot when 2-5 bars were asked to fit in 120 px);
* titles, axis titles and legends are inside the chart's own SVG (``contains: padding``), axis
  titles are never cut (``titleLimit`` 0) and every axis title names its unit (``axis_title``);
* labels never overlap: band axes have a row per label, continuous axes drop labels that would
  collide (``labelOverlap``, by parity: what is left stays evenly spaced), long labels are cut at
  ``LABEL_PX`` with an ellipsis; a time axis ticks at a calendar step chosen from the data's span
  (``time_ticks``: every 6 hours, every day, every week ...) so its labels are evenly spaced and
  say no more than the step needs ("03 Nov" for days, "03 Nov 06:00" for hours);
* a legend lists every series; past ``LEGEND_MAX`` series a chart keeps the top ones and folds
  or drops the rest, and its legend title says so (``top_series``);
* charts are drawn on the server to SVG (``svg``, vl-convert), ``RENDER_PX`` wide, and shown inline
  by ``ui.chart`` (scaled down in a narrower window, never up): no Vega JavaScript in the browser,
  which cost ~1 CPU-s a reload and a 2.6 MB download on a first load. The price: **no tooltips and
  no interaction on a chart** (a static SVG; marks carry no per-item ARIA labels either, which would
  triple a heatmap's size): the table under each chart carries its numbers, and a pick (a heatmap
  row's job, a burn-down's node) is made in a selectable table or a select box beside it.
"""

from __future__ import annotations

from datetime import datetime, timedelta

import altair as alt

# Altair looks pandas up in sys.modules without importing it: while a first script run is still
# importing pandas (a cold server, a rerun started by a widget), another run would find it half
# initialised ("partially initialized module 'pandas' has no attribute 'Timestamp'"). Importing it
# here waits on the import lock until it is whole.
import pandas  # noqa: F401, I001
import polars as pl

# The hourly series of a 1,024-GPU week pass Altair's 5,000-row guard; the pages already cut frames
# to what is drawn, so the guard would only get in the way.
alt.data_transformers.disable_max_rows()

ROW_PX = 22  # one bar, one heatmap row: room for an 11-px label and a gap
MIN_PLOT_PX = 140  # the smallest plot area: a single bar still reads as a bar
SERIES_PLOT_PX = 260  # lines and areas over time
LABEL_PX = 240  # band labels (job, node, project names) longer than this end in "…"
JOB_LABEL_PX = 330  # a heatmap row's "job name (project, user)": a name (or a 13-digit job id) and two names, whole
LEGEND_MAX = 12  # series a legend lists before the rest is folded into "other"
# the chart's whole width as drawn on the server (title, axes and legend inside): what the wide layout's
# main column holds beside the sidebar at a 1,400-1,900 px window; a narrower window scales it down
RENDER_PX = 960
# Text is measured on the server and drawn by the browser, so both must use the same font: DejaVu Sans
# (Debian's fonts-dejavu-core, on the project's machines; without it vl-convert would measure in its
# bundled Liberation Sans, ~12 % narrower than DejaVu draws). A browser without DejaVu takes Verdana
# (as wide) or its sans-serif (Arial, Helvetica: narrower), so labels only get more room.
FONT = "DejaVu Sans, Verdana, sans-serif"
LABEL_FONT_PX, TITLE_FONT_PX = 11, 12  # axis and legend labels; axis and legend titles (the chart's: 14)

STATUS_COLORS = {"funded": "#2ca02c", "at-risk": "#ff7f0e", "exhausted": "#d62728"}


def plot_height(rows: int, per_row: int = ROW_PX, minimum: int = MIN_PLOT_PX) -> int:
    """Pixels of plot area for ``rows`` bands (bars, heatmap rows)."""
    return max(minimum, per_row * max(rows, 1))


def axis_title(what: str, unit: str) -> str:
    """An axis title that names its unit: ``what (unit)``."""
    return f"{what} ({unit})"


def top_series(frame: pl.DataFrame, key: str, weight: str, *, n: int = LEGEND_MAX, fold: list[str] | None = None,
               largest: bool = True, noun: str = "series") -> tuple[pl.DataFrame, str | None]:
    """At most ``n`` series of ``key`` for a legend: those with the largest (or smallest) total
    ``weight``. With ``fold`` (columns to sum), the rest become one series ``other (k noun)``;
    without, they are dropped. Returns (frame, a note for the legend title or None when all fit)."""
    if not frame.height:
        return frame, None
    totals = frame.group_by(key).agg(pl.col(weight).fill_null(0).sum()).sort([weight, key],
                                                                              descending=[largest, False])
    if totals.height <= n:
        return frame, None
    keep = totals.head(n if fold is None else n - 1)[key].to_list()
    rest = totals.height - len(keep)
    order = "largest" if largest else "smallest"
    if fold is None:
        return frame.filter(pl.col(key).is_in(keep)), f"the {len(keep)} {order} of {totals.height} {noun}"
    other = f"other ({rest} {noun})"
    relabelled = frame.with_columns(pl.when(pl.col(key).is_in(keep)).then(pl.col(key)).otherwise(pl.lit(other)).alias(key))
    index = [c for c in frame.columns if c not in fold and c != key]
    folded = relabelled.group_by([*index, key], maintain_order=True).agg(pl.col(c).sum() for c in fold)
    return folded.select(frame.columns), f"top {len(keep)} of {totals.height} {noun}, the rest as other"


def legend(title: str, note: str | None = None, **kw) -> alt.Legend:
    """A legend under the plot that lists every entry (``symbolLimit`` 0) in as many columns as fit."""
    text = f"{title} — {note}" if note else title
    return alt.Legend(title=text, orient="bottom", direction="horizontal", columns=kw.pop("columns", 4),
                      symbolLimit=0, labelLimit=LABEL_PX, titleLimit=0, **kw)


def finish(chart, title: str, height: int, subtitle: str | None = None):
    """The shared sizing and text rules (see the module docstring) on a finished chart or layer."""
    params = {"text": title, "anchor": "start", "limit": 0}
    if subtitle:
        params["subtitle"] = subtitle
    return chart.properties(
        title=alt.TitleParams(**params), width=RENDER_PX, height=height, padding={"left": 8, "top": 4, "right": 8, "bottom": 20},
        autosize=alt.AutoSizeParams(type="fit-x", contains="padding"),
    ).configure(font=FONT).configure_mark(aria=False).configure_title(fontSize=14, subtitleFontSize=TITLE_FONT_PX).configure_axis(
        labelLimit=LABEL_PX, titleLimit=0, labelOverlap="parity", labelSeparation=4, labelFontSize=LABEL_FONT_PX,
        titleFontSize=TITLE_FONT_PX,
    ).configure_legend(titleLimit=0, labelLimit=LABEL_PX, symbolLimit=0, labelFontSize=LABEL_FONT_PX,
                       titleFontSize=TITLE_FONT_PX)


# (calendar interval, step, label format), finest first: the first that puts at most TIME_LABELS
# ticks on the data's span is used
TIME_STEPS = [("hour", 1, "%d %b %H:00"), ("hour", 2, "%d %b %H:00"), ("hour", 3, "%d %b %H:00"),
              ("hour", 6, "%d %b %H:00"), ("hour", 12, "%d %b %H:00"), ("day", 1, "%d %b"), ("day", 2, "%d %b"),
              ("week", 1, "%d %b"), ("week", 2, "%d %b"), ("month", 1, "%b %Y"), ("month", 3, "%b %Y"),
              ("year", 1, "%Y"), ("year", 5, "%Y")]
TIME_LABELS = 9  # at most, across RENDER_PX: an "03 Nov 06:00" label is ~80 px
_STEP_HOURS = {"hour": 1, "day": 24, "week": 168, "month": 730, "year": 8766}


def _calendar_floor(t: datetime, interval: str, step: int) -> datetime:
    day = t.replace(hour=0, minute=0, second=0, microsecond=0)
    if interval == "hour":
        return day + timedelta(hours=t.hour - t.hour % step)
    if interval == "day":
        return day
    if interval == "week":
        return day - timedelta(days=day.weekday())  # Mondays (ISO weeks)
    if interval == "month":
        return day.replace(day=1, month=1 + (day.month - 1) // step * step)
    return day.replace(day=1, month=1, year=day.year - day.year % step)


def _calendar_next(t: datetime, interval: str, step: int) -> datetime:
    if interval in ("hour", "day", "week"):
        return t + timedelta(hours=_STEP_HOURS[interval] * step)
    months = t.month - 1 + (step if interval == "month" else 12 * step)
    return t.replace(year=t.year + months // 12, month=months % 12 + 1)


def time_ticks(*columns: pl.Series) -> tuple[list[datetime] | None, str]:
    """(tick times, label format) for a time axis over ``columns``' span: every calendar step of
    the finest step that fits TIME_LABELS labels, so the labels fall evenly ("01 Nov", "02 Nov", ...
    not "01 Nov 00:00, 02 Nov 12:00, 03 Nov 12:00" as thinning by label width left them). None
    (Vega's own ticks) when fewer than two steps fall on the span."""
    values = [v for c in columns for v in (c.min(), c.max()) if v is not None]
    if not values:
        return None, TIME_STEPS[0][2]
    lo, hi = min(values), max(values)
    span_h = (hi - lo).total_seconds() / 3600
    interval, step, fmt = next((s for s in TIME_STEPS if span_h / (_STEP_HOURS[s[0]] * s[1]) <= TIME_LABELS - 1),
                               TIME_STEPS[-1])
    ticks, t = [], _calendar_floor(lo, interval, step)
    while t <= hi:
        if t >= lo:
            ticks.append(t)
        t = _calendar_next(t, interval, step)
    return (ticks if len(ticks) >= 2 else None), fmt


def time_x(field: str, title: str, *columns: pl.Series) -> alt.X:
    """A time x axis (UTC) over ``columns``, ticked by ``time_ticks``; "parity" thinning stays as a
    guard (it keeps every other label, so still evenly spaced)."""
    ticks, fmt = time_ticks(*columns)
    values = {"values": [alt.DateTime(year=t.year, month=t.month, date=t.day, hours=t.hour) for t in ticks]} if ticks else {}
    return alt.X(f"{field}:T", title=axis_title(title, "UTC"),
                 axis=alt.Axis(format=fmt, labelOverlap="parity", labelSeparation=8, **values))


def _hour_axis(frame: pl.DataFrame) -> alt.X:
    return time_x("hour", "hour", frame["hour"]) if frame.height else time_x("hour", "hour")


def _band(field: str, title: str, **kw) -> alt.Y:
    """A categorical y axis of one row per value, labels never thinned out, its title level above
    the labels (Vega's automatic place for a vertical title beside them assumes labels at most its
    default 180-px limit wide, so beside longer labels it lands on them)."""
    return alt.Y(field, title=title, sort=kw.pop("sort", None),
                 axis=alt.Axis(labelOverlap=False, labelFlush=False, labelLimit=kw.pop("label_px", LABEL_PX), titleAngle=0,
                               titleAlign="right", titleBaseline="bottom", titleX=-6, titleY=-6, **kw))


# --- utilization ---------------------------------------------------------------------------------

def pct_over_time(frame: pl.DataFrame, color: str | None, title: str) -> alt.Chart:
    """Lines of ``pct`` (0..100 % of capacity) per hour; dashed = active, solid = allocated; one
    colour per ``color`` value (at most LEGEND_MAX, the largest by capacity share)."""
    note = None
    if color:
        frame, note = top_series(frame, color, "pct", noun=f"{color}s")
    enc = {
        "x": _hour_axis(frame),
        "y": alt.Y("pct:Q", title=axis_title("share of installed capacity", "%"), scale=alt.Scale(domain=[0, 100])),
        "strokeDash": alt.StrokeDash("measure:N", sort=["allocated", "active"], legend=legend("measure")),
    }
    if color:
        enc["color"] = alt.Color(f"{color}:N", legend=legend(color, note))
    return finish(alt.Chart(frame).mark_line().encode(**enc), title, SERIES_PLOT_PX)


def stacked_hours(frame: pl.DataFrame, value: str, color: str, title: str, y_title: str) -> alt.Chart:
    """Stacked areas of ``value`` per hour and ``color`` (past LEGEND_MAX values, the rest summed
    into "other"). ``y_title`` names the unit."""
    frame, note = top_series(frame.select("hour", color, value), color, value, fold=[value], noun=f"{color}s")
    return finish(alt.Chart(frame).mark_area().encode(
        x=_hour_axis(frame),
        y=alt.Y(f"{value}:Q", title=y_title, stack=True),
        color=alt.Color(f"{color}:N", legend=legend(color, note)),
    ), title, SERIES_PLOT_PX)


def idle_heatmap(cells: pl.DataFrame, rows: pl.DataFrame, title: str, bin_hours: int) -> alt.Chart:
    """Who holds idle GPUs: one row per job (``label``, in ``rows``' order: most idle first), one
    column per ``bin_hours`` bin, coloured by the share of the job's held GPU-hours that idled in
    that bin (white: not held). ``cells``: label, bin, bin_end, gpu_hours_held, gpu_hours_idle, idle_share."""
    order = rows["label"].to_list()
    return finish(alt.Chart(cells.select("label", "bin", "bin_end", "idle_share")).mark_rect().encode(
        x=time_x("bin", f"time, {bin_hours}-hour bins", *([cells["bin"], cells["bin_end"]] if cells.height else [])),
        x2="bin_end:T",
        y=_band("label:N", "job name (project, user)", sort=order, label_px=JOB_LABEL_PX),
        color=alt.Color("idle_share:Q", scale=alt.Scale(domain=[0, 1], scheme="reds"),
                        legend=alt.Legend(title=axis_title("idle share of held GPU-hours", "%"), format="%",
                                          orient="bottom", gradientLength=300, titleLimit=0,
                                          values=[0, 0.25, 0.5, 0.75, 1])),
    ), title, plot_height(len(order), 18))


# --- fair share, budgets ---------------------------------------------------------------------------

def ratio_over_time(frame: pl.DataFrame, value: str, title: str, y_title: str) -> alt.Chart:
    """A line per project of ``value`` (a ratio, drawn as %) per snapshot and the 100 % line; past
    LEGEND_MAX projects, the ones with the lowest mean ratio (the worst served)."""
    # only the columns drawn: the history's others hold level FS = ∞ for a project without usage,
    # which JSON (and so the chart's spec) cannot carry
    frame = frame.select("as_of", "node", value)
    frame, note = top_series(frame, "node", value, largest=False, noun="projects (lowest mean)")
    base = alt.Chart(frame).mark_line(point=True).encode(
        x=time_x("as_of", "snapshot", *([frame["as_of"]] if frame.height else [])),
        y=alt.Y(f"{value}:Q", title=y_title, axis=alt.Axis(format="%")),
        color=alt.Color("node:N", legend=legend("project", note)))
    rule = alt.Chart(pl.DataFrame({"y": [1.0]})).mark_rule(strokeDash=[4, 4], color="gray").encode(y="y:Q")
    return finish(base + rule, title, SERIES_PLOT_PX)


def balance_over_time(frame: pl.DataFrame, title: str) -> alt.Chart:
    """Bars of each project's delivery balance (GPU-hours still owed) at the end of every
    settlement period; past LEGEND_MAX projects, the ones owed most."""
    frame = frame.select("period_start", "node", "gpu_hours_balance")
    frame, note = top_series(frame, "node", "gpu_hours_balance", noun="projects (owed most)")
    return finish(alt.Chart(frame).mark_bar().encode(
        x=alt.X("yearmonthdate(period_start):O", title="settlement period (start, UTC)",
                axis=alt.Axis(format="%d %b", labelAngle=0)),
        xOffset=alt.XOffset("node:N"),
        y=alt.Y("gpu_hours_balance:Q", title=axis_title("owed, not yet delivered", "GPU-hours")),
        color=alt.Color("node:N", legend=legend("project", note)),
        tooltip=["node:N", alt.Tooltip("period_start:T", format="%Y-%m-%d"),
                 alt.Tooltip("gpu_hours_balance:Q", format=",.1f", title="balance GPU-h")],
    ), title, SERIES_PLOT_PX)


def budget_vs_consumed(frame: pl.DataFrame, title: str) -> alt.Chart:
    """Consumed as % of each node's budget (a bar per node, coloured by status); budgets differ by
    orders of magnitude, so side-by-side absolute bars would hide the small nodes."""
    data = frame.filter(pl.col("budget_gpu_hours") > 0).with_columns(
        consumed_pct=100 * pl.col("consumed_gpu_hours") / pl.col("budget_gpu_hours"))
    domain = list(STATUS_COLORS)
    # the axis is the budget, 0-100 %, whatever the largest bar (a node at 16.7 % fills 16.7 %); past
    # 100 % it grows, and the dashed rule marks where the budget ends
    top = max(100.0, float(data["consumed_pct"].max() or 0.0)) if data.height else 100.0
    bars = alt.Chart(data).mark_bar(size=ROW_PX - 6).encode(
        y=_band("node:N", "org node"),
        x=alt.X("consumed_pct:Q", title=axis_title("consumed of the period's budget", "%"),
                scale=alt.Scale(domain=[0, top], nice=False)),
        color=alt.Color("status:N", scale=alt.Scale(domain=domain, range=[STATUS_COLORS[d] for d in domain]),
                        legend=legend("status")))
    budget = alt.Chart(pl.DataFrame({"consumed_pct": [100.0]})).mark_rule(strokeDash=[4, 4], color="gray").encode(
        x="consumed_pct:Q")
    return finish(bars + budget, title, plot_height(data.height))


def burn_down(history: pl.DataFrame, projection: pl.DataFrame, budget: float, title: str) -> alt.Chart:
    """Remaining budget per snapshot (solid), the projection to exhaustion at the 7-day burn rate
    (dashed) and zero."""
    y_title = axis_title("remaining budget", "normalised GPU-h")
    actual = alt.Chart(history).mark_line(point=True).encode(
        x=time_x("as_of", "date", *[f["as_of"] for f in (history, projection) if f.height]),
        y=alt.Y("remaining_gpu_hours:Q", title=y_title, scale=alt.Scale(domain=[0, max(budget, 1.0)])))
    projected = alt.Chart(projection).mark_line(strokeDash=[6, 4], color="#ff7f0e").encode(
        x="as_of:T", y="remaining_gpu_hours:Q")
    return finish(actual + projected, title, SERIES_PLOT_PX)


# --- chargeback ------------------------------------------------------------------------------------

def amount_bars(frame: pl.DataFrame, title: str, currency: str) -> alt.Chart:
    """A bar per ``label`` (project, or "(idle)"), the amount owed, coloured by line kind."""
    kinds = frame["line_kind"].n_unique() if frame.height else 0
    labels = frame["label"].n_unique() if frame.height else 0
    return finish(alt.Chart(frame).mark_bar(size=ROW_PX - 6).encode(
        y=_band("label:N", "project", sort="-x"),
        x=alt.X("amount:Q", title=axis_title("amount", currency), axis=alt.Axis(format=",.0f")),
        color=alt.Color("line_kind:N", legend=legend("line", columns=max(kinds, 1))),
    ), title, plot_height(labels))


# --- what-if ---------------------------------------------------------------------------------------

def whatif_delivery(frame: pl.DataFrame, title: str) -> alt.Chart:
    """Delivered ÷ owed per project, a bar per policy side by side, and the 100 % line."""
    projects = frame["project"].n_unique() if frame.height else 1
    policies = frame["policy"].n_unique() if frame.height else 1
    bars = alt.Chart(frame).mark_bar().encode(
        y=_band("project:N", "project"),
        yOffset=alt.YOffset("policy:N", sort=None),
        x=alt.X("delivery_ratio:Q", title=axis_title("delivered ÷ owed GPU-hours", "%"), axis=alt.Axis(format="%")),
        color=alt.Color("policy:N", sort=None, legend=legend("policy")))
    rule = alt.Chart(pl.DataFrame({"x": [1.0]})).mark_rule(strokeDash=[4, 4], color="gray").encode(x="x:Q")
    return finish(bars + rule, title, plot_height(projects, max(ROW_PX, 10 * policies + 8)))


def whatif_waits(frame: pl.DataFrame, title: str) -> alt.Chart:
    """Wait p90 (bars) and p50 (black ticks) in hours per job class, a bar per policy."""
    enc = {"x": alt.X("job_class:N", title="job class", sort=["small", "medium", "large"],
                      axis=alt.Axis(labelAngle=0, labelOverlap=False, labelLimit=LABEL_PX)),
           "xOffset": alt.XOffset("policy:N", sort=None)}
    p90 = alt.Chart(frame).mark_bar().encode(
        **enc, y=alt.Y("wait_p90_hours:Q", title=axis_title("wait before start", "hours")),
        color=alt.Color("policy:N", sort=None, legend=legend("policy")))
    p50 = alt.Chart(frame).mark_tick(color="black", thickness=2).encode(**enc, y="wait_p50_hours:Q")
    return finish(p90 + p50, title, SERIES_PLOT_PX)


def whatif_sweep(frame: pl.DataFrame, parameter: str, title: str) -> alt.Chart:
    """The worst project's and all projects' delivered ÷ owed per swept value."""
    data = frame.select(pl.col("value").cast(pl.Utf8),
                        pl.col("worst_delivery_ratio").cast(pl.Float64).alias("worst project"),
                        pl.col("delivery_ratio").cast(pl.Float64).alias("all projects")).unpivot(
        index="value", variable_name="measure", value_name="ratio")
    return finish(alt.Chart(data).mark_line(point=True).encode(
        x=alt.X("value:N", title=f"{parameter} (the swept value)", sort=None,
                axis=alt.Axis(labelAngle=0, labelOverlap="parity")),
        y=alt.Y("ratio:Q", title=axis_title("delivered ÷ owed GPU-hours", "%"), axis=alt.Axis(format="%")),
        color=alt.Color("measure:N", legend=legend("measure"))), title, SERIES_PLOT_PX)


# --- drawn on the server ---------------------------------------------------------------------------

def svg(spec: str | dict) -> str:
    """A finished chart's Vega-Lite spec (``chart.to_json()``) drawn to SVG on the server by
    vl-convert (Vega-Lite and Vega in an embedded JavaScript engine, no browser): RENDER_PX wide, as
    tall as its plot area needs, its text measured in ``FONT``. The first call in a process starts
    the engine (~1 s): ``warm`` does it at server start."""
    import vl_convert  # lazy: optional extra gpuledger[dashboards]

    return vl_convert.vegalite_to_svg(spec)


def warm() -> None:
    """Start vl-convert's engine (its first drawing takes ~1 s; later ones tens of ms)."""
    svg({"data": {"values": [{"x": 1}]}, "mark": "point", "encoding": {"x": {"field": "x", "type": "quantitative"}}})
