import polars as pl
import streamlit as st
from gpuledger.dashboards import access, queries, team_queue, ui


def beside_the_scheduler(path: str, queued: pl.DataFrame) -> pl.DataFrame:
    """The queued jobs with what their scheduler last said and whether gpuledger's rank agrees
    (issue 38: Slurm's pending Reason, Kueue's QuotaReserved reason)."""
    keys = tuple(queued.select("cluster", "job_id").iter_rows())
    if not keys:
        return queued.with_columns(scheduler_says=pl.lit(None, pl.String), versus=pl.lit(None, pl.String))
    return queued.join(ui.scheduler_view(path, keys).drop("agrees"), on=["cluster", "job_id"], how="left")


def waits_section(ctx, projects: list[str]) -> None:
    """Wait times of the team's jobs submitted in the period, per project and job class."""
    st.subheader("Wait times")
    waits = ui.waits(ctx.path, ctx.start, ctx.end, tuple(projects), "project-class")
    if not waits.height:
        st.caption("No job of yours was submitted in this period.")
        return
    ui.table(waits, ui.wait_columns("project-class"), key="team_waits", rows=max(min(waits.height, 10), 1),
             download="wait-times")
    st.caption("Seconds from submission to start of the jobs submitted in the period (`gpuledger report waits "
               "--by user --cause` gives the same figures per user); jobs still waiting count with their wait so "
               "far. The cause is gpuledger's reading of each wait; the scheduler's own reason is beside each "
               "queued job above.")


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
    # the jobs open at the period's end (the data's "now" when the period runs to it)
    now = min(ctx.end, state.data_now)
    st.caption(f"{', '.join(team_nodes)}: projects {', '.join(projects) or 'none'}; {ctx.period_label}; "
               f"jobs open at {now:%Y-%m-%d %H:%M} UTC.")
    ui.filters_note("the period (jobs open at its end, waste and actions within it) and clusters; the team is "
                    "picked here (a lead's own), not by the sidebar's org node")
    jobs = ui.open_jobs(ctx.path, tuple(projects), ctx.clusters, now)
    tree = ui.fairshare_latest(ctx.path, ctx.end)
    budgets = ui.budgets_latest(ctx.path, ctx.end)
    waste = ui.user_waste(ctx.path, ctx.start, ctx.end, tuple(projects), ctx.clusters)
    running = jobs.filter(pl.col("status") == "running")
    queued = jobs.filter(pl.col("status") == "queued")
    mine = budgets.filter(pl.col("node").is_in(team_nodes + projects))
    a, b, c, d = st.columns(4)
    a.metric("Running jobs", ui.count(running.height, "job"), help=f"holding {running['gpus'].sum() or 0:g} GPUs")
    b.metric("Queued jobs", ui.count(queued.height, "job"))
    team_budget = mine.filter(pl.col("node").is_in(team_nodes))
    left = team_budget["remaining_gpu_hours"].sum() if team_budget.height else None
    c.metric("Budget left (normalised GPU-h)", f"{left:,.1f}" if left is not None else "no budget")
    # the same rows as the Waste table below (so the figure follows the cluster filter too)
    idle = waste["gpu_hours_idle"].sum() if waste.height else 0.0
    d.metric("Idle GPU-hours (waste)", ui.hours(idle))

    explained = queries.priority_why(jobs, budgets, tree)
    if "name" in explained.columns:  # the job by the name its owner gave it, the id in a later column
        explained = explained.with_columns(job_name=pl.coalesce("name", "job_id"))
    else:
        explained = explained.with_columns(job_name=pl.col("job_id"))
    cols = {"job_name": "job", "why": st.column_config.TextColumn("priority: why", width=560),
            "funded": st.column_config.CheckboxColumn("funded"),
            "planned_priority": ui.int_col("priority (gpuledger)"), "user_name": "user", "project": "project",
            "gpus": ui.number_col("GPUs", "%g"), "gpu_model": "GPU model", "kind": "kind",
            "declared_priority": ui.int_col("priority (declared)"), "job_id": "job id", "cluster": "cluster"}
    st.subheader("Running")
    ui.table(explained.filter(pl.col("status") == "running"),
             {**dict(list(cols.items())[:3]), "start_time": ui.utc_col("started"), **dict(list(cols.items())[3:])},
             key="team_running", download="running-jobs")
    st.subheader("Queued (in queue order)")
    queued_jobs = beside_the_scheduler(ctx.path, explained.filter(pl.col("status") == "queued")
                                       .with_row_index("queue_position", offset=1))
    ui.table(queued_jobs,
             {"queue_position": ui.int_col("position"), **dict(list(cols.items())[:3]),
              "scheduler_says": st.column_config.TextColumn("scheduler says", help="the scheduler's own latest reason "
                                                            "(Slurm's Reason, Kueue's QuotaReserved)"),
              "versus": st.column_config.TextColumn("gpuledger vs the scheduler", width=420,
                                                    help="gpuledger's rank beside the scheduler's reason, and whether "
                                                         "they agree (`gpuledger enforce explain JOB`)"),
              "submit_time": ui.utc_col("submitted"), **dict(list(cols.items())[3:])},
             key="team_queued", download="queued-jobs")
    st.caption("Priority from the newest enforcement plan (funded-ness, fair-share rank); queued jobs start in "
               "this order (priority, then the earlier submission) as GPUs free up.")

    team_queue.section(ctx, now, ui.load_config(ctx.path).policy)  # a lead changes their own queue (issue 38)
    waits_section(ctx, projects)

    st.subheader("Budget")
    ui.table(mine, {"node": "org node", "status": "status", "remaining_gpu_hours": ui.norm_h("left"),
                    "runs_out": ui.utc_col("runs out", "YYYY-MM-DD"),
                    "left_at_period_end": ui.norm_h("left at period end"),
                    "burn_gpu_hours_per_day": ui.number_col("burn (norm. GPU-h/day)"),
                    "budget_gpu_hours": ui.norm_h("budget"), "consumed_gpu_hours": ui.norm_h("consumed")},
             key="team_budget")

    st.subheader("Waste")
    ui.table(waste, {"user_name": "user", "gpu_hours_idle": ui.gpu_h("idle"), "project": "project",
                     "gpu_hours_allocated": ui.gpu_h("allocated")}, key="team_waste", download="waste-by-user")
    open_findings = ui.squatting_open(ctx.path, ctx.clusters).filter(pl.col("project").is_in(projects))
    st.caption(f"Idle = allocated while the GPU was not busy; {ui.count(open_findings.height, 'job')} of yours "
               f"{'is an open squatting finding' if open_findings.height == 1 else 'are open squatting findings'} "
               "right now (see Squatters).")

    st.subheader("Last enforcement actions on your jobs")
    audit = queries.AuditFilter(ctx.start, ctx.open_end, ctx.clusters, tuple(projects))
    acts = ui.enforcement_page(ctx.path, audit, 0, 20)
    if acts.height:
        ui.table(acts, {"planned_at": ui.utc_col("cycle"), "job_name": "job", "action": "action",
                        "reason": st.column_config.TextColumn("reason", width="large"), "outcome": "outcome",
                        "phase": "phase", "project": "project"}, key="team_actions")
    else:
        st.caption("No enforcement action on your jobs in this period.")
