"""My team's "Manage your queue" section (issue 38): a lead signed in through OIDC orders their
team's queued jobs, funds them from the team's budget, holds and releases them. The only part of
the dashboards that writes: each click is one short write through enforce.team_store (checked,
audited with the sign-in e-mail), and enforcement's next plan -> apply carries it to the
scheduler. Everyone else sees why they cannot change anything."""

from __future__ import annotations

from datetime import datetime

import polars as pl
import streamlit as st
from gpuledger.dashboards import access, queries, ui
from gpuledger.enforce import team_store as store

from gpuledger import warehouse
from gpuledger.errors import UsageError
from gpuledger.rules.clock import utc_now

MESSAGE = "team_queue_message"


def section(ctx: ui.Context, now: datetime, policy) -> None:
    """Draw the section for the signed-in viewer, acting at the data's ``now`` (which jobs are queued)."""
    st.subheader("Manage your team's queue")
    if ctx.local or ctx.viewer.role != "lead":
        st.caption("A team lead signed in through the dashboards' OIDC sign-in orders, funds and holds their own "
                   "team's queued jobs here (or with `gpuledger team`); "
                   + ("local mode has no sign-in, so nobody can." if ctx.local else "your sign-in is not a lead's."))
        return
    nodes = list(ctx.viewer.led_nodes)
    node = st.selectbox("Team to manage", nodes, key="team_manage_node") if len(nodes) > 1 else nodes[0]
    try:
        node, projects = access.team_of(ctx.viewer, ctx.state.parent_of, node)
    except ValueError as exc:
        st.warning(str(exc))
        return
    said = st.session_state.pop(MESSAGE, None)
    if said:
        (st.error if said[0] == "error" else st.success)(said[1])
    rows = queries.team_queue(ctx.path, tuple(sorted(projects)), now)
    queued = rows.filter(pl.col("queued")) if rows.height else rows
    if not queued.height:
        st.caption(f"Team {node} has no queued job at {now:%Y-%m-%d %H:%M} UTC: nothing to order.")
        _audit(ctx, node)
        return
    queued = queued.with_columns(
        job=pl.format("{} ({}/{})", pl.coalesce("name", "job_id"), "cluster", "job_id"),
        order=pl.int_range(1, pl.len() + 1))
    ui.table(queued, {"order": ui.int_col("your order"), "job": "job", "held": st.column_config.CheckboxColumn("held"),
                      "fund_hours": ui.number_col("funded by the team (h)", "%g"),
                      "fund_gpu_hours": ui.norm_h("committed"), "project": "project", "user_name": "user",
                      "gpus": ui.number_col("GPUs", "%g"), "set_by": "last changed by"}, key="team_manage_queue")
    labels = queued["job"].to_list()
    keys = list(zip(queued["cluster"].to_list(), queued["job_id"].to_list(), strict=True))
    pick = st.selectbox("Queued job", labels, key="team_manage_job")
    i = labels.index(pick)
    cap = float(policy.funding.min_runtime_cap_hours)
    hours = st.number_input("Hours to fund (its minimum runtime)", min_value=0.5, max_value=cap, value=min(2.0, cap),
                            step=0.5, key="team_manage_hours")
    top, up, down, fund, unfund, hold, release = st.columns(7)
    team = _team(node, projects, ctx.viewer.email)
    order = [f"{c}/{j}" for c, j in keys]
    if top.button("To the top", disabled=i == 0, key="team_top"):  # a long queue: one click, not many
        order.insert(0, order.pop(i))
        _write(ctx, lambda con, at: _words(team_store().set_order(con, team, order, now=now, at=at)))
    if up.button("Move up", disabled=i == 0, key="team_up"):
        order[i - 1], order[i] = order[i], order[i - 1]
        _write(ctx, lambda con, at: _words(team_store().set_order(con, team, order, now=now, at=at)))
    if down.button("Move down", disabled=i == len(order) - 1, key="team_down"):
        order[i + 1], order[i] = order[i], order[i + 1]
        _write(ctx, lambda con, at: _words(team_store().set_order(con, team, order, now=now, at=at)))
    if fund.button("Fund", key="team_fund"):
        _write(ctx, lambda con, at: _words([team_store().set_funding(con, team, order[i], float(hours), now=now, at=at,
                                                                     cfg=ui.load_config(ctx.path))]))
    if unfund.button("Unfund", key="team_unfund"):
        _write(ctx, lambda con, at: _words([team_store().set_funding(con, team, order[i], None, now=now, at=at,
                                                                     cfg=ui.load_config(ctx.path))]))
    if hold.button("Hold", key="team_hold"):
        _write(ctx, lambda con, at: _words([team_store().set_hold(con, team, order[i], True, now=now, at=at)]))
    if release.button("Release", key="team_release"):
        _write(ctx, lambda con, at: _words([team_store().set_hold(con, team, order[i], False, now=now, at=at)]))
    st.caption("Your order swaps priorities only among your team's own queued jobs, band by band (funded, "
               "unfunded): no other team's job moves. Funding commits GPUs × hours × the model's budget weight of "
               "what the team's budget has left. Enforcement's next cycle sets these in the scheduler (Slurm Nice / "
               "hold, Kueue priority / active), a dry run unless enforcement applies for real.")
    _audit(ctx, node)


def team_store():
    return store


def _team(node: str, projects, email: str):
    return team_store().Team(node=node, projects=frozenset(projects), lead=email, identity="oidc")


def _words(changes) -> str:
    if not changes:
        return "nothing changed"
    return "; ".join(f"{job}: {before} -> {after}" for job, before, after in changes) + " (audited)"


def _write(ctx: ui.Context, change) -> None:
    """One short write: the change and its audit rows in one transaction; a refusal (over budget,
    not queued any more) is shown, never a traceback. Then the page runs again with the new state."""
    try:
        with warehouse.open_writer(ctx.path) as con:
            st.session_state[MESSAGE] = ("ok", change(con, utc_now()))
    except UsageError as exc:
        st.session_state[MESSAGE] = ("error", str(exc))
    st.rerun()


def _audit(ctx: ui.Context, node: str) -> None:
    changes = queries.team_audit(ctx.path, node)
    if not changes.height:
        st.caption(f"No change to team {node}'s queue yet.")
        return
    st.markdown("**Changes to your team's queue** (newest first)")
    ui.table(changes, {"changed_at": ui.utc_col("when"), "changed_by": "who", "identity": "identified by",
                       "change": "change", "job_id": "job", "before": "before", "after": "after",
                       "cluster": "cluster"}, key="team_manage_audit")
