import polars as pl
import streamlit as st
from gpuledger.dashboards import charts, queries, ui

ctx = ui.context()
if ctx is not None:
    st.title("Utilization")
    st.caption(f"{ctx.period_label}; allocated = held by a job (what is charged), active = GPU busy.")
    ui.filters_note("period and clusters on every figure; the org node and your projects on \"Who holds idle GPUs\"",
                    "the org node on capacity, allocation and MIG figures (installed GPUs belong to clusters, "
                    "not to org nodes)")
    hourly = ui.utilization(ctx.path, ctx.start, ctx.end, ctx.clusters)
    if not hourly.height:
        st.info("No utilization rows in this period: pick another period, or run `gpuledger pipelines run-once`.")
        st.stop()
    totals = queries.utilization_totals(hourly)
    a, b, c, d = st.columns(4)
    a.metric("Allocated of capacity", ui.pct(totals["allocation_pct"]))
    b.metric("Active of capacity", ui.pct(totals["active_pct"]))
    c.metric("Active of allocated", ui.pct(totals["active_of_allocated_pct"]))
    d.metric("Unallocated capacity (GPU-h)", f"{totals['gpu_hours_unallocated']:,.1f}")
    st.caption(f"Capacity {ui.hours(totals['gpu_hours_capacity'])}, allocated {ui.hours(totals['gpu_hours_allocated'])}, "
               f"active {ui.hours(totals['gpu_hours_active'])} over the period.")

    by = st.radio("Split by", ["cluster", "GPU model", "fleet"], horizontal=True, key="util_by")
    key = {"cluster": "cluster", "GPU model": "model", "fleet": None}[by]
    ui.chart(charts.pct_over_time(queries.utilization_by(hourly, key), key, "Allocated and active % of capacity"))
    st.caption("Solid: share of installed GPUs held by jobs each hour; dashed: share actually busy.")

    kinds = ui.usage_by_kind(ctx.path, ctx.start, ctx.end, ctx.clusters)
    if kinds.height:
        st.subheader("Workload kinds")
        # the hour-by-hour chart on request: each chart costs the browser a Vega run on every load,
        # and the table below answers "which kinds use the GPUs" at a glance
        if st.toggle("Show each hour's split (chart)", key="kind_chart"):
            measure = st.radio("Measure", ["allocated", "active"], horizontal=True, key="kind_measure")
            ui.chart(charts.stacked_hours(queries.kind_pct(kinds, hourly), f"{measure}_pct", "kind",
                                          f"{measure.capitalize()} % of capacity by workload kind",
                                          charts.axis_title(measure, "% of installed capacity")))
            st.caption(f"How the {'held' if measure == 'allocated' else 'busy'} share of the installed GPUs splits "
                       "between training, fine-tuning, batch, inference and interactive work.")
        per_kind = kinds.group_by("kind").agg(pl.col("gpu_hours_allocated").sum(), pl.col("gpu_hours_active").sum()).with_columns(
            active_of_allocated_pct=100 * pl.col("gpu_hours_active") / pl.col("gpu_hours_allocated")
        ).sort("gpu_hours_allocated", descending=True)
        ui.table(per_kind, {"kind": "workload kind", "gpu_hours_allocated": ui.gpu_h("allocated"),
                            "gpu_hours_active": ui.gpu_h("active"),
                            "active_of_allocated_pct": ui.number_col("active of allocated (%)")},
                 key="util_kinds", download="utilization-by-kind")

    st.subheader("MIG slices")
    mig = queries.mig_summary(ui.device_hours(ctx.path, ctx.start, ctx.end, ctx.clusters, ctx.state.data_now,
                                              ctx.idle_below, True))
    if mig.height:
        ui.table(mig, {"mig_profile": "MIG profile", "model": "GPU model", "instances": ui.int_col("instances"),
                       "gpu_equivalents": ui.number_col("GPU equivalents (compute slices)", "%,.2f"),
                       "gpu_hours_held": ui.gpu_h("held"), "held_pct": ui.number_col("held of their capacity (%)")},
                 key="util_mig")
        st.caption("MIG instances count by compute slices (1g = 1/7 of an A100/H100).")
    else:
        st.caption("No MIG instances in these clusters.")

    st.subheader("Who holds idle GPUs")
    limit = st.slider("Jobs shown (most idle GPU-hours first)", 8, 128, 24, step=8, key="heat_limit")
    heat = ui.idle_heat(ctx.path, ctx.start, ctx.end, ctx.projects, ctx.clusters, ctx.default_tier, limit)
    jobs, cells = heat["jobs"], heat["cells"]
    idle_all = float(jobs["gpu_hours_idle_all"][0]) if jobs.height else 0.0
    idle_jobs = int(jobs["jobs_idle"][0]) if jobs.height else 0
    m1, m2 = st.columns(2)
    m1.metric("GPU-hours held while idle", ui.hours(idle_all))
    m2.metric("Jobs that held idle GPUs", ui.count(idle_jobs, "job"))
    ui.restricted_note(ctx, "jobs")
    if jobs.height:
        ui.chart(charts.idle_heatmap(cells, jobs, f"Idle share of each job's held GPU-hours "
                                     f"(the {ui.count(jobs.height, 'job')} most idle of {idle_jobs:,})",
                                     heat["bin_hours"]))
        st.caption(f"A row per job, most idle first; darker = more of the GPU-hours it held in that "
                   f"{heat['bin_hours']}-hour bin were idle (under {ctx.idle_below:.0%} activity); white = not held. "
                   "Pick a row below for its findings and enforcement history.")
        currency = jobs["currency"].drop_nulls()[0] if jobs["currency"].drop_nulls().len() else None
        table = jobs.with_columns(idle_share=pl.col("gpu_hours_idle") / pl.col("gpu_hours_allocated"))
        event = ui.table(table, {
            "job_id": "job", "project": "project", "user_name": "user",
            "gpu_hours_idle": ui.gpu_h("wasted"), "idle_cost": ui.money_col("wasted cost", currency),
            "gpu_hours_allocated": ui.gpu_h("held"), "idle_share": ui.ratio_col("idle of held"),
            "name": "job name", "cluster": "cluster"}, key="heat_jobs", download="idle-jobs",
            on_select="rerun", selection_mode="single-row")
        picked = event.selection.rows if event is not None and hasattr(event, "selection") else []
        if picked:
            row = table.row(picked[0], named=True)
            st.markdown(f"**{row['job_id']}** ({row['project']}, {row['user_name']}): findings and enforcement")
            history = ui.finding_history(ctx.path, (row["job_key"],))
            if history["events"].height:
                ui.table(history["events"], {"event_time": ui.utc_col("evaluated"), "event": "event",
                                             "finding": "finding", "severity": "severity",
                                             "idle_minutes": ui.number_col("idle (min)", "%,.0f")}, key="heat_events")
            else:
                st.caption("No squatting finding for this job (idle, but not all of its GPUs through the sustained "
                           "window, or exempt).")
            if history["enforcement"].height:
                ui.table(history["enforcement"], {"planned_at": ui.utc_col("cycle"), "action": "action",
                                                  "reason": st.column_config.TextColumn("reason", width="large"),
                                                  "phase": "phase", "outcome": "outcome"}, key="heat_enforcement")
            else:
                st.caption("No enforcement action planned or applied for this job.")
    else:
        st.success("No job held idle GPUs in this period.")
