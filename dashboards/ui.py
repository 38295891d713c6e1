"""What every page shares: cached reads (a TTL, so a page rerun does not touch the warehouse and a
pipeline write shows within a minute), the sign-in and its viewer, the sidebar filters, and the
page that says what to run when there is nothing to show. Pages draw; they get data only here."""

from __future__ import annotations

import os
from dataclasses import dataclass
from datetime import date, datetime, time, timedelta

import polars as pl
import streamlit as st
from gpuledger.dashboards import access, queries

TTL_S = int(os.environ.get("GPULEDGER_DASHBOARD_TTL_S", "60"))
CTX_KEY = "gpuledger_ctx"


def _cached(fn):
    return st.cache_data(ttl=TTL_S, show_spinner=False)(fn)


# Every read the pages make, cached per arguments (the warehouse path is one of them).
warehouse_state = _cached(queries.warehouse_state)
utilization = _cached(queries.utilization)
usage_by_kind = _cached(queries.usage_by_kind)
device_hours = _cached(queries.device_hours)
fairshare_latest = _cached(queries.fairshare_latest)
fairshare_history = _cached(queries.fairshare_history)
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


@st.cache_data(ttl=TTL_S, show_spinner=False)
def load_config():
    """The config (roles, policy) as ``$GPULEDGER_CONFIG`` / ./gpuledger.yaml / the example."""
    from gpuledger.config import load_config as load

    return load(None)


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
    from gpuledger.warehouse import resolve_warehouse_path

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
                   clusters=tuple(clusters), node=node, idle_below=policy.squatting.idle_threshold_ratio)


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


def day_of(d: date | datetime | None) -> str:
    return "–" if d is None else f"{d:%Y-%m-%d}"
