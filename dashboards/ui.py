"""What every page shares: cached reads (a TTL, so a page rerun does not touch the warehouse and a
pipeline write shows within a minute), the sign-in and its viewer, the sidebar filters, and the
page that says what to run when there is nothing to show. Pages draw; they get data only here."""

from __future__ import annotations

import os
import threading
import time as clock
from dataclasses import dataclass
from datetime import datetime, time, timedelta

import polars as pl
import streamlit as st
from gpuledger.dashboards import access, charts, queries
from gpuledger.warehouse import resolve_warehouse_path

from gpuledger.rules.severity import LOOKBACK, idle_capped

TTL_S = int(os.environ.get("GPULEDGER_DASHBOARD_TTL_S", "60"))
CTX_KEY = "gpuledger_ctx"


def _cached(fn):
    return st.cache_data(ttl=TTL_S, show_spinner=False)(fn)


# Every read the pages make, cached per arguments (the warehouse path is one of them).
warehouse_state = _cached(queries.warehouse_state)
utilization = _cached(queries.utilization)
usage_by_kind = _cached(queries.usage_by_kind)
device_hours = _cached(queries.device_hours)
idle_heat = _cached(queries.idle_heat)
enforcement_page = _cached(queries.enforcement_page)
enforcement_counts = _cached(queries.enforcement_counts)
fairshare_latest = _cached(queries.fairshare_latest)
fairshare_history = _cached(queries.fairshare_history)
delivery_balance = _cached(queries.delivery_balance)
budgets_latest = _cached(queries.budgets_latest)
budget_history = _cached(queries.budget_history)
squatting_open = _cached(queries.squatting_open)
finding_history = _cached(queries.finding_history)
enforcement = _cached(queries.enforcement)
open_jobs = _cached(queries.open_jobs)
project_usage = _cached(queries.project_usage)
user_waste = _cached(queries.user_waste)
statement = _cached(queries.statement)
chargeback_period = _cached(queries.chargeback_period)
whatif_result = _cached(queries.whatif_result)
waits = _cached(queries.waits)
scheduler_view = _cached(queries.scheduler_view)


@st.cache_data(ttl=TTL_S, show_spinner=False)
def load_config(path: str):
    """The config in force (roles, policy, chargeback): the warehouse's stored version
    (queries.config_in_force)."""
    return queries.config_in_force(path)


@dataclass(frozen=True)
class Context:
    """The sidebar's choices and the viewer, handed from the entry script to the page."""

    path: str
    state: queries.WarehouseState
    viewer: access.Viewer
    local: bool
    start: datetime
    end: datetime
    clusters: tuple[str, ...]  # empty = every cluster
    node: str | None
    idle_below: float  # squatting idle threshold (ratio)
    default_tier: str = "reserved"  # pricing tier of jobs that name none (policy.chargeback)

    @property
    def projects(self) -> tuple[str, ...]:
        """Projects under the chosen node that the viewer may see."""
        under = access.leaves(self.state.parent_of, [self.node]) if self.node else set(self.state.projects())
        return tuple(sorted(p for p in under if self.viewer.may_see(p)))

    @property
    def open_end(self) -> datetime | None:
        """The period's end, or None when the period runs to the newest data (then audit rows
        stamped after the data's "now", e.g. a plan made today over a replayed week, count too)."""
        return None if self.end >= _hour_ceiling(self.state.data_now) else self.end

    @property
    def period_label(self) -> str:
        return f"{self.start:%Y-%m-%d %H:%M} – {self.end:%Y-%m-%d %H:%M} UTC"


def warehouse_path() -> str:
    return str(resolve_warehouse_path(None))


def auth_section() -> dict | None:
    """The ``[auth]`` section of the Streamlit secrets, or None (local mode)."""
    try:
        if "auth" in st.secrets:
            return dict(st.secrets["auth"])
    except Exception:  # no secrets file at all: local mode  # noqa: BLE001
        return None
    return None


def sign_in(auth: dict) -> None:
    """The sign-in page (Streamlit's OIDC flow); stops the script until signed in."""
    st.title("gpuledger")
    st.write("Sign in to see GPU time, fair share, budgets and chargeback for your teams.")
    providers = [k for k, v in auth.items() if isinstance(v, dict)]
    provider = None if "server_metadata_url" in auth or not providers else providers[0]
    st.button("Log in", type="primary", on_click=(lambda: st.login(provider)) if provider else st.login)
    st.stop()


LINK_TTL_S = 900  # a remembered deep link waits this long for its sign-in


@st.cache_resource
def _pending_links() -> dict:
    """Deep links waiting for their browser's sign-in: browser key -> (time, url path, query params)."""
    return {}


def _browser_key() -> str | None:
    """This browser, across the sign-in's redirects: the token inside Streamlit's XSRF cookie (the
    cookie's text is re-masked on every response; the token it carries is kept)."""
    raw = st.context.cookies.get("_streamlit_xsrf")
    if not raw:
        return None
    try:
        # lazy: optional: its absence is handled here
        from streamlit.web.server.starlette import starlette_app_utils

        token, _ = starlette_app_utils.decode_xsrf_token_string(raw)
        return token.hex() if token else raw
    except Exception:  # another server or version: the cookie's text, right until it is re-masked  # noqa: BLE001
        return raw


def remember_link(url_path: str, params: dict) -> None:
    key = _browser_key()
    if key is None:
        return

    links = _pending_links()
    now = clock.monotonic()
    for stale in [k for k, (at, *_) in links.items() if now - at > LINK_TTL_S]:
        links.pop(stale, None)
    if len(links) < 10_000:
        links[key] = (now, url_path, dict(params))


def take_link() -> tuple[str, dict] | None:
    """The deep link this browser opened before signing in (once), or None."""
    key = _browser_key()
    found = _pending_links().pop(key, None) if key else None
    if found is None:
        return None

    at, url_path, params = found
    return (url_path, params) if clock.monotonic() - at <= LINK_TTL_S else None


def tree_order(parent_of: dict) -> list[tuple[str, int]]:
    """(node, depth) depth-first, children by name."""
    children: dict = {}
    for node, parent in parent_of.items():
        children.setdefault(parent, []).append(node)
    out: list[tuple[str, int]] = []

    def walk(node: str, depth: int) -> None:
        out.append((node, depth))
        for child in sorted(children.get(node, [])):
            walk(child, depth + 1)

    for root in sorted(children.get(None, [])):
        walk(root, 0)
    return out


def sidebar(state: queries.WarehouseState, viewer: access.Viewer, local: bool, policy) -> Context:
    """The shared filters: period (UTC days), clusters, org-tree node."""
    sb = st.sidebar
    last = state.last_hour or state.data_now
    first = state.first_hour or last
    last_day, first_day = last.date(), first.date()
    default_start = max(first_day, last_day - timedelta(days=6))
    picked = sb.date_input("Period (UTC days)", value=(default_start, last_day), min_value=first_day,
                           max_value=last_day, key="period")
    days = list(picked) if isinstance(picked, (tuple, list)) else [picked]
    d0 = days[0] if days else default_start
    d1 = days[-1] if len(days) > 1 else d0
    start = datetime.combine(d0, time())
    end = min(datetime.combine(d1 + timedelta(days=1), time()), _hour_ceiling(state.data_now))
    clusters = sb.multiselect("Cluster", list(state.clusters), default=[], key="clusters",
                              placeholder="all clusters")
    order = tree_order(state.parent_of)
    nodes = [n for n, _ in order]
    depth = dict(order)
    node = sb.selectbox("Org node", nodes, index=0, key="node",
                        format_func=lambda n: f"{'  ' * depth.get(n, 0)}{n} ({state.kind_of.get(n, '')})")
    sb.caption(f"Data through {state.data_now:%Y-%m-%d %H:%M} UTC; figures refresh every {TTL_S} s.")
    return Context(path=state.path, state=state, viewer=viewer, local=local, start=start, end=end,
                   clusters=tuple(clusters), node=node, idle_below=policy.squatting.idle_threshold_ratio,
                   default_tier=policy.chargeback.default_tier)


def _hour_ceiling(moment: datetime) -> datetime:
    floor = moment.replace(minute=0, second=0, microsecond=0)
    return floor if floor == moment else floor + timedelta(hours=1)


def context() -> Context | None:
    """The page's context, or None after drawing what to run (a page then returns)."""
    ctx = st.session_state.get(CTX_KEY)
    if ctx is None:
        st.info("Open the dashboard through its entry script: `make dashboard` "
                "(`streamlit run dashboards/app.py`).")
    return ctx


def show_not_ready(state: queries.WarehouseState) -> None:
    st.title("gpuledger")
    st.warning(state.problem)
    st.markdown("What to run:\n\n"
                "- `make demo`: simulates a week of 256 GPUs and materializes every table, then "
                "`make dashboard`;\n"
                "- or `gpuledger simulate warehouse --gpus 64 --days 7` then `gpuledger pipelines run-once`;\n"
                f"- for real data: `gpuledger ingest …` / `gpuledger ingest jobs-csv …`, then the pipelines "
                "(`make dev` runs them on schedules).\n\n"
                f"The dashboard reads `{state.path}` (set `GPULEDGER_WAREHOUSE` to read another file).")


def restricted_note(ctx: Context, what: str) -> None:
    if not ctx.viewer.sees_everything:
        st.caption(f"Showing {what} of your projects only ({', '.join(ctx.projects) or 'none'}); "
                   "org-level totals include everyone.")


def visible(frame: pl.DataFrame, ctx: Context, column: str = "project") -> pl.DataFrame:
    """Rows of the projects under the chosen node that the viewer may see."""
    if not frame.height:
        return frame
    return frame.filter(pl.col(column).is_in(list(ctx.projects)))


def visible_nodes(ctx: Context) -> set[str]:
    """Org nodes under the chosen node the viewer may see: everything for admins and finance; for
    a lead their projects and the nodes above them (the org-level aggregates)."""
    parent_of = ctx.state.parent_of
    under = access.subtree(parent_of, ctx.node) if ctx.node else set(parent_of)
    if ctx.viewer.sees_everything:
        return under
    mine = set(ctx.viewer.projects or ())
    for project in list(mine):
        parent = parent_of.get(project)
        while parent is not None:
            mine.add(parent)
            parent = parent_of.get(parent)
    return under & mine


def hours(x) -> str:
    return "–" if x is None else f"{x:,.1f} GPU-h"


def pct(x) -> str:
    return "–" if x is None else f"{x:.1f} %"


def money(amount, currency: str) -> str:
    return f"{amount:,.2f} {currency}"




# --- charts drawn on the server --------------------------------------------------------------------

@st.cache_data(show_spinner=False, max_entries=128)
def _chart_svg(spec: str) -> str:
    """The SVG of one chart spec (its JSON: data and all), drawn once per server: a reload, or
    another viewer with the same filters, costs a lookup."""
    # every mark says aria-hidden="true" (charts draw marks without ARIA labels): 19 bytes a heatmap cell
    svg = charts.svg(spec).replace(' aria-hidden="true"', "")
    # scale down in a window narrower than RENDER_PX (the viewBox keeps the proportions), never up
    return svg.replace("<svg ", '<svg style="max-width:100%;height:auto" ', 1)


@st.cache_resource(show_spinner=False)
def warm_server() -> bool:
    """Once per server process, beside the first page's queries: start the chart renderer (its first
    drawing takes ~1 s; a chart asked for meanwhile waits for it), then import the code the
    finance statement is built with (~0.5 s of imports the chargeback page would otherwise wait
    on). Code only: no query runs and nothing is cached ahead of a reader."""
    def warm():
        charts.warm()
        queries.warm_imports()

    threading.Thread(target=warm, name="gpuledger-warm", daemon=True).start()
    return True


# The SVG goes into the page as it is (the browser parses it natively): through st.markdown it would
# become a React element per mark (a heatmap's thousands of cells) and load rehype-raw; st.html's
# sanitizer drops SVG. Safe: vl-convert escapes every text it draws.
_svg_view = st.components.v2.component(
    "gpuledger_chart", html='<div class="gl-chart" data-testid="glChart"></div>', isolate_styles=False,
    js="export default function({data, parentElement}) {"
       " const box = parentElement.querySelector('.gl-chart'); if (box.dataset.svg !== data.key) {"
       " box.innerHTML = data.svg; box.dataset.svg = data.key; } }")


def chart(chart) -> None:
    """A chart of gpuledger.dashboards.charts, drawn on the server and shown as inline SVG (no Vega
    in the browser; the axes, labels and legends are the SVG's own elements). Every page draws its
    charts here."""
    spec = chart.to_json(validate=False, indent=None)
    svg = _chart_svg(spec)
    _svg_view(data={"svg": svg, "key": str(hash(svg))})


# --- tables people read --------------------------------------------------------------------------

GRID_ROW_PX = 35  # Streamlit's data-grid row (and header) height
TABLE_ROWS = 15  # rows a table shows before it scrolls inside itself


EAGER_ROWS = 1_000  # a table up to this many rows is sent whole (Streamlit's own eager limit for lazy tables)
SELECT_SENDS = 200  # rows a selectable table sends (a selection needs every row in the browser)


def table(frame: pl.DataFrame, columns: dict, *, key: str, rows: int = TABLE_ROWS, download: str | None = None,
          **kw):
    """``frame`` as a table people read: only ``columns`` (name -> a column_config or a header), in
    that order (the column that answers the page's question first), human headers, empty cells empty
    (not "None"), tall enough for ``rows`` rows before it scrolls. Paged by the server: past
    EAGER_ROWS rows the browser gets the rows in view and fetches more as it scrolls or sorts
    (Streamlit's lazy tables), so a long table costs what is shown; a selectable one (``on_select``)
    sends its first SELECT_SENDS rows. ``download``: a "Download CSV" button with every row and
    column under its machine name (what scripts read), written only when clicked."""
    selectable = "on_select" in kw
    shown = frame.head(SELECT_SENDS) if selectable else frame
    shown = shown.select(list(columns))
    config = {name: c.config() if isinstance(c, Num) else st.column_config.TextColumn(c) if isinstance(c, str) else c
              for name, c in columns.items()}
    height = GRID_ROW_PX * (max(min(shown.height, rows), 1) + 1) + 3
    lazy = not selectable and shown.height > EAGER_ROWS
    event = st.dataframe(shown, hide_index=True, column_config=config, height=height, width="stretch", key=key,
                         placeholder="", lazy=lazy, **kw)
    if selectable and frame.height > shown.height:
        st.caption(f"The first {shown.height:,} of {frame.height:,} rows" + (" (all of them in the CSV download)."
                                                                           if download else "."))
    elif lazy:
        st.caption(f"{frame.height:,} rows, fetched from the server as you scroll or sort.")
    if download:
        st.download_button("Download CSV", lambda: frame.write_csv(), file_name=f"{download}.csv", mime="text/csv",
                           key=f"{key}_csv", help=f"{download}.csv: every column, machine names", on_click="ignore")
    return event


@dataclass(frozen=True)
class Num:
    """A number column: its header and Streamlit's printf format (and the same in Python, for
    text beside the table)."""

    label: str
    printf: str
    python: str
    help: str | None = None  # the header's tooltip: what a short header means

    def config(self):
        return st.column_config.NumberColumn(self.label, format=self.printf, help=self.help)

    def explained(self, help: str) -> Num:  # "help": Streamlit's name for a header's tooltip
        return Num(self.label, self.printf, self.python, help)


def gpu_h(label: str, digits: int = 1) -> Num:
    return Num(f"{label} (GPU-h)", f"%,.{digits}f", f"{{:,.{digits}f}}")


def norm_h(label: str) -> Num:
    return Num(f"{label} (norm. GPU-h)", "%,.1f", "{:,.1f}")


def money_col(label: str, currency: str | None) -> Num:
    return Num(f"{label} ({currency})" if currency else label, "%,.2f", "{:,.2f}")


def ratio_col(label: str) -> Num:
    """A ratio 0..1 shown as a percentage."""
    return Num(f"{label} (%)", "percent", "{:.2%}")


def number_col(label: str, fmt: str = "%,.1f") -> Num:
    return Num(label, fmt, "{:" + fmt[1:] + "}")  # "%,.1f" -> "{:,.1f}"


def int_col(label: str) -> Num:
    return Num(label, "%,d", "{:,.0f}")


def utc_col(label: str, fmt: str = "YYYY-MM-DD HH:mm"):
    return st.column_config.DatetimeColumn(f"{label} (UTC)", format=fmt)


def wait_columns(by: str) -> dict:
    """The columns of a wait-times table (queries.waits): seconds, the causes counted."""
    keys = {"project": {"project": "project"}, "project-class": {"project": "project", "job_class": "class"},
            "class": {"job_class": "class"}}[by]
    return {**keys, "jobs": int_col("jobs").explained("jobs submitted in the period"),
            "still_waiting": int_col("still waiting").explained("not started yet: counted with their wait so far"),
            "wait_p50_s": number_col("wait p50 (s)", "%,.0f").explained("median seconds from submission to start"),
            "wait_p90_s": number_col("wait p90 (s)", "%,.0f"), "wait_max_s": number_col("wait max (s)", "%,.0f"),
            "first_gpu_p50_s": number_col("1st GPU p50 (s)", "%,.0f").explained(
                "a job's first submission to its first start (all runs of a requeued job)"),
            "main_cause": "main cause",
            "causes": st.column_config.TextColumn(
                "causes (jobs)", width="medium",
                help="each wait's main cause: scheduler (its own reason or delay), squatters (idle jobs held its "
                     "pool's GPUs), budget (unfunded, later work started first), fair-share (later work ranked "
                     "above it started first), pool-full (every GPU of the kind busy with earlier work), none")}


def capped_idle_note(idle_minutes: pl.Series) -> str | None:
    """What a squatting table must say when a finding was idle for the whole evidence window
    (rules.severity.LOOKBACK): its minutes are a floor, not the stretch's length. None when none was."""
    window = LOOKBACK.total_seconds() / 60
    capped = int(idle_capped(idle_minutes).sum())  # as enforcement counts a finding capped
    if not capped:
        return None
    return (f"Idle since and idle (min) are counted within the evidence's last {window / 60:g} h: "
            f"{count(capped, 'finding')} at {window:,.0f} min {'was' if capped == 1 else 'were'} idle at least "
            "that long, since that time or earlier.")


def count(n: int | float, noun: str, plural: str | None = None) -> str:
    """ "1 job", "2 jobs", "1,208 GPUs"."""
    n = int(n or 0)
    return f"{n:,} {noun if n == 1 else plural or noun + 's'}"


def gib(frame: pl.DataFrame, column: str, into: str) -> pl.DataFrame:
    """``column`` (bytes) as ``into`` in GiB (2^30 bytes)."""
    return frame.with_columns((pl.col(column) / 2**30).alias(into))


def filters_note(applies: str, not_applies: str | None = None) -> None:
    """Say plainly which of the sidebar's filters a page (or a part) honours."""
    st.caption(f"Filters: {applies}." + (f" Not applied: {not_applies}." if not_applies else ""))
