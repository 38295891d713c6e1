import polars as pl
import streamlit as st
from gpuledger.dashboards import access, queries, ui

ctx = ui.context()
if ctx is not None:
    st.title("My team")
    state = ctx.state
    if ctx.viewer.role == "lead":
        team_nodes = list(ctx.viewer.led_nodes)
        projects = sorted(ctx.viewer.projects or ())
    elif ctx.viewer.sees_everything:
        nodes = [n for n, _ in ui.tree_order(state.parent_of) if state.parent_of.get(n) is not None]
        default = nodes.index(ctx.node) if ctx.node in nodes else 0
        pick = st.selectbox("Team (org node; a lead sees their own here)", nodes, index=default, key="team_node")
        team_nodes = [pick]
        projects = sorted(access.leaves(state.parent_of, [pick]))
    else:
        st.info("This page shows a team lead their projects. Your sign-in is not listed as a lead in the "
                "config (`dashboards.leads`); ask an admin to add you.")
        st.stop()
    st.caption(f"{', '.join(team_nodes)}: projects {', '.join(projects) or 'none'}; {ctx.period_label}.")
    now = state.data_now
    jobs = ui.open_jobs(ctx.path, tuple(projects), ctx.clusters, now)
    tree = ui.fairshare_latest(ctx.path, ctx.end)
    budgets = ui.budgets_latest(ctx.path, ctx.end)
    usage = ui.project_usage(ctx.path, ctx.start, ctx.end, tuple(projects))
    running = jobs.filter(pl.col("status") == "running")
    queued = jobs.filter(pl.col("status") == "queued")
    mine = budgets.filter(pl.col("node").is_in(team_nodes + projects))
    a, b, c, d = st.columns(4)
    a.metric("Running jobs", f"{running.height} jobs", help=f"holding {running['gpus'].sum() or 0:g} GPUs")
    b.metric("Queued jobs", f"{queued.height} jobs")
    team_budget = mine.filter(pl.col("node").is_in(team_nodes))
    left = team_budget["remaining_gpu_hours"].sum() if team_budget.height else None
    c.metric("Budget left (normalised GPU-h)", f"{left:,.1f}" if left is not None else "no budget")
    idle = usage["gpu_hours_idle"].sum() if usage.height else 0.0
    d.metric("Idle GPU-hours (waste)", ui.hours(idle))

    cols = {"why": st.column_config.TextColumn("priority: why", width="large"),
            "planned_priority": st.column_config.NumberColumn("priority (gpuledger)"),
            "declared_priority": st.column_config.NumberColumn("priority (declared)"),
            "gpus": st.column_config.NumberColumn("GPUs", format="%g"),
            "min_runtime_s": st.column_config.NumberColumn("min runtime (s)"),
            "start_time": st.column_config.DatetimeColumn("started (UTC)", format="YYYY-MM-DD HH:mm"),
            "submit_time": st.column_config.DatetimeColumn("submitted (UTC)", format="YYYY-MM-DD HH:mm")}
    show = ["cluster", "job_id", "project", "user_name", "kind", "gpus", "gpu_model", "planned_priority",
            "declared_priority", "funded", "why"]
    explained = queries.priority_why(jobs, budgets, tree)
    st.subheader("Running")
    st.dataframe(explained.filter(pl.col("status") == "running").select([*show[:6], "start_time", *show[6:]]),
                 hide_index=True, column_config=cols)
    st.subheader("Queued")
    st.dataframe(explained.filter(pl.col("status") == "queued").select([*show[:6], "submit_time", *show[6:]]),
                 hide_index=True, column_config=cols)
    st.caption("Priority from the newest enforcement plan (funded-ness, fair-share rank); queued jobs start in "
               "priority order as GPUs free up.")

    st.subheader("Budget")
    st.dataframe(mine.select("node", "status", "budget_gpu_hours", "consumed_gpu_hours", "remaining_gpu_hours",
                             "burn_gpu_hours_per_day", "projected_exhaustion"), hide_index=True, column_config={
        "budget_gpu_hours": st.column_config.NumberColumn("budget (norm. GPU-h)", format="%.1f"),
        "consumed_gpu_hours": st.column_config.NumberColumn("consumed (norm. GPU-h)", format="%.1f"),
        "remaining_gpu_hours": st.column_config.NumberColumn("left (norm. GPU-h)", format="%.1f"),
        "burn_gpu_hours_per_day": st.column_config.NumberColumn("burn (norm. GPU-h/day)", format="%.1f"),
        "projected_exhaustion": st.column_config.DatetimeColumn("runs out (UTC)", format="YYYY-MM-DD")})

    st.subheader("Waste")
    waste = ui.user_waste(ctx.path, ctx.start, ctx.end, tuple(projects), ctx.clusters)
    st.dataframe(waste, hide_index=True, column_config={
        "user_name": st.column_config.TextColumn("user"),
        "gpu_hours_allocated": st.column_config.NumberColumn("allocated (GPU-h)", format="%.1f"),
        "gpu_hours_idle": st.column_config.NumberColumn("idle (GPU-h)", format="%.1f")})
    open_findings = ui.squatting_open(ctx.path, ctx.clusters).filter(pl.col("project").is_in(projects))
    st.caption(f"Idle = allocated while the GPU was not busy; {open_findings.height} of your jobs are open "
               "squatting findings right now (see Squatters).")

    st.subheader("Last enforcement actions on your jobs")
    acts = ui.enforcement(ctx.path, ctx.start, ctx.open_end, ctx.clusters).filter(pl.col("project").is_in(projects)).head(20)
    if acts.height:
        st.dataframe(acts.select("planned_at", "phase", "action", "outcome", "job_id", "project", "reason"),
                     hide_index=True, column_config={
                         "planned_at": st.column_config.DatetimeColumn("cycle (UTC)", format="YYYY-MM-DD HH:mm"),
                         "reason": st.column_config.TextColumn("reason", width="large")})
    else:
        st.caption("No enforcement action on your jobs in this period.")
