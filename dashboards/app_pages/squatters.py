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
    ui.filters_note("clusters, the org node and your projects", "the period (findings are the ones open now)")
    findings = ui.squatting_open(ctx.path, ctx.clusters)
    everyone = findings
    findings = ui.visible(findings, ctx)
    a, b, c, d = st.columns(4)
    a.metric("Open findings", ui.count(findings.height, "job"))
    b.metric("GPUs idle of held", f"{int(findings['gpus_idle'].sum() or 0):,} of {ui.count(findings['gpus_total'].sum() or 0, 'GPU')}")
    b2 = findings["gpu_hours_idle"].sum() if findings.height else 0.0
    c.metric("Wasted", ui.hours(b2))
    costs = findings.group_by("currency").agg(pl.col("idle_cost").sum()).drop_nulls("currency") if findings.height else None
    d.metric("Wasted cost", " + ".join(ui.money(r["idle_cost"], r["currency"]) for r in costs.iter_rows(named=True))
             if costs is not None and costs.height else "none")  # no finding, no currency to state
    ui.restricted_note(ctx, "findings")
    if not ctx.viewer.sees_everything:
        st.caption(f"Org-wide: {everyone.height} open findings, {ui.hours(everyone['gpu_hours_idle'].sum() if everyone.height else 0)} wasted.")
    if not findings.height:
        st.success("No job is sitting on idle GPUs right now.")
        st.stop()
    currency = findings["currency"].drop_nulls()[0] if findings["currency"].drop_nulls().len() else None
    # the job by its name, how bad, whose and what it costs first: they fit beside the sidebar at 1,400 px
    ui.table(ui.gib(findings, "fb_used_bytes_idle", "memory_gib"), {
        "job_name": "job", "severity": "severity", "project": "project", "user_name": "owner",
        "idle_cost": ui.money_col("wasted cost", currency), "gpu_hours_idle": ui.gpu_h("wasted", 2),
        "gpus_idle": ui.number_col("idle GPUs", "%g"), "gpus_total": ui.number_col("held GPUs", "%g"),
        "idle_since": ui.utc_col("idle since"), "idle_minutes": ui.number_col("idle (min)", "%,.0f"),
        "memory_gib": ui.number_col("memory held (GiB)", "%,.1f"), "finding": "finding",
        "activity_signal": "activity signal", "job_id": "job id", "cluster": "cluster"},
        key="sq_findings", download="squatters")
    if note := ui.capped_idle_note(findings["idle_minutes"]):
        st.caption(note)
    st.subheader("A finding's history")
    keys = [f"{r['cluster']}/{r['job_id']}" for r in findings.iter_rows(named=True)]
    # alerts link here as /squatters?cluster=C&job=J
    linked = f"{st.query_params.get('cluster', '')}/{st.query_params.get('job', '')}"
    names = {f"{r['cluster']}/{r['job_id']}": r["job_name"] for r in findings.iter_rows(named=True)}
    key = st.selectbox("Job", keys, index=keys.index(linked) if linked in keys else 0, key="sq_job",
                       format_func=lambda k: k if names.get(k) in (None, k.split("/", 1)[1]) else f"{names[k]} ({k})")
    history = ui.finding_history(ctx.path, (key,))
    st.markdown("**Lifecycle** (warn → second warning → eligible for preemption)")
    ui.table(history["events"], {"event_time": ui.utc_col("evaluated"), "event": "event", "finding": "finding",
                                 "severity": "severity", "idle_minutes": ui.number_col("idle (min)", "%,.0f"),
                                 "first_seen": ui.utc_col("episode since"), "job_id": "job", "cluster": "cluster"},
             key="sq_events")
    st.markdown("**Alerts sent**")
    if history["alerts"].height:
        ui.table(history["alerts"], {"created_at": ui.utc_col("raised"), "subject": "subject", "status": "status",
                                     "channel": "channel", "recipient": "to", "attempts": ui.int_col("delivery attempts"),
                                     "sent_at": ui.utc_col("sent"), "severity": "severity"}, key="sq_alerts")
    else:
        st.caption("No alert recorded for this job (none raised yet, or alerts are not configured).")
    st.markdown("**Enforcement**")
    if history["enforcement"].height:
        ui.table(history["enforcement"], {"planned_at": ui.utc_col("cycle"), "action": "action",
                                          "reason": st.column_config.TextColumn("reason", width="large"),
                                          "phase": "phase", "outcome": "outcome",
                                          "priority": ui.int_col("priority (scheduler units)"),
                                          "dry_run": st.column_config.CheckboxColumn("dry run")}, key="sq_enforcement")
    else:
        st.caption("No enforcement action planned or applied for this job.")
