import polars as pl
import streamlit as st
from gpuledger.dashboards import ui

ctx = ui.context()
if ctx is not None:
    st.title("Squatters")
    last = ctx.state.counts.get("last_squatting_evaluation")
    when = f"{last:%Y-%m-%d %H:%M} UTC" if last else "none yet"
    st.caption(f"Jobs holding GPUs that stay idle, as of the last evaluation ({when}); idle = under "
               f"{ctx.idle_below:.0%} activity through the sustained window.")
    findings = ui.squatting_open(ctx.path, ctx.clusters)
    everyone = findings
    findings = ui.visible(findings, ctx)
    a, b, c, d = st.columns(4)
    a.metric("Open findings", f"{findings.height} jobs")
    b.metric("GPUs idle of held", f"{int(findings['gpus_idle'].sum() or 0)} of {int(findings['gpus_total'].sum() or 0)} GPUs")
    b2 = findings["gpu_hours_idle"].sum() if findings.height else 0.0
    c.metric("Wasted", ui.hours(b2))
    costs = findings.group_by("currency").agg(pl.col("idle_cost").sum()).drop_nulls("currency") if findings.height else None
    d.metric("Wasted cost", " + ".join(ui.money(r["idle_cost"], r["currency"]) for r in costs.iter_rows(named=True))
             if costs is not None and costs.height else "0.00")
    ui.restricted_note(ctx, "findings")
    if not ctx.viewer.sees_everything:
        st.caption(f"Org-wide: {everyone.height} open findings, {ui.hours(everyone['gpu_hours_idle'].sum() if everyone.height else 0)} wasted.")
    if not findings.height:
        st.success("No job is sitting on idle GPUs right now.")
        st.stop()
    st.dataframe(findings.select("severity", "finding", "cluster", "job_id", "project", "user_name", "gpus_idle", "gpus_total",
                                 "idle_since", "idle_minutes", "gpu_hours_idle", "idle_cost", "currency", "fb_used_bytes_idle",
                                 "activity_signal"),
                 hide_index=True, column_config={
                     "user_name": st.column_config.TextColumn("owner"),
                     "gpus_idle": st.column_config.NumberColumn("idle GPUs"),
                     "gpus_total": st.column_config.NumberColumn("held GPUs"),
                     "idle_since": st.column_config.DatetimeColumn("idle since (UTC)", format="YYYY-MM-DD HH:mm"),
                     "idle_minutes": st.column_config.NumberColumn("idle (min)", format="%.0f"),
                     "gpu_hours_idle": st.column_config.NumberColumn("wasted (GPU-h)", format="%.2f"),
                     "idle_cost": st.column_config.NumberColumn("wasted cost", format="%.2f"),
                     "fb_used_bytes_idle": st.column_config.NumberColumn("memory held (bytes)", format="%d")})
    st.subheader("A finding's history")
    keys = [f"{r['cluster']}/{r['job_id']}" for r in findings.iter_rows(named=True)]
    # alerts link here as /squatters?cluster=C&job=J
    linked = f"{st.query_params.get('cluster', '')}/{st.query_params.get('job', '')}"
    key = st.selectbox("Job", keys, index=keys.index(linked) if linked in keys else 0, key="sq_job")
    history = ui.finding_history(ctx.path, (key,))
    st.markdown("**Lifecycle** (warn → second warning → eligible for preemption)")
    st.dataframe(history["events"], hide_index=True, column_config={
        "first_seen": st.column_config.DatetimeColumn("episode since (UTC)", format="YYYY-MM-DD HH:mm"),
        "event_time": st.column_config.DatetimeColumn("evaluated (UTC)", format="YYYY-MM-DD HH:mm"),
        "idle_minutes": st.column_config.NumberColumn("idle (min)", format="%.0f")})
    st.markdown("**Alerts sent**")
    if history["alerts"].height:
        st.dataframe(history["alerts"], hide_index=True, column_config={
            "created_at": st.column_config.DatetimeColumn("raised (UTC)", format="YYYY-MM-DD HH:mm"),
            "sent_at": st.column_config.DatetimeColumn("sent (UTC)", format="YYYY-MM-DD HH:mm"),
            "attempts": st.column_config.NumberColumn("delivery attempts")})
    else:
        st.caption("No alert recorded for this job (none raised yet, or alerts are not configured).")
    st.markdown("**Enforcement**")
    if history["enforcement"].height:
        st.dataframe(history["enforcement"], hide_index=True, column_config={
            "planned_at": st.column_config.DatetimeColumn("cycle (UTC)", format="YYYY-MM-DD HH:mm"),
            "priority": st.column_config.NumberColumn("priority (scheduler units)"),
            "reason": st.column_config.TextColumn("reason", width="large")})
    else:
        st.caption("No enforcement action planned or applied for this job.")
