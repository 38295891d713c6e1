import streamlit as st
from gpuledger.dashboards import queries, ui

ctx = ui.context()
if ctx is not None:
    st.title("Enforcement")
    st.caption(f"Every planned and applied action whose cycle falls in {ctx.period_label}, newest first, with the "
               "reason a researcher reads.")
    ui.filters_note("the period, clusters, the org node and your projects")
    base = queries.AuditFilter(ctx.start, ctx.open_end, ctx.clusters, ctx.projects)
    period = ui.enforcement_counts(ctx.path, base)
    if not period["rows_period"]:
        st.info("No enforcement actions in this period. `gpuledger enforce plan` records a plan; "
                "`gpuledger enforce apply` acts on it (dry run unless `--yes`).")
        st.stop()
    c1, c2, c3 = st.columns(3)
    actions = c1.multiselect("Action", period["actions"], key="enf_action", placeholder="all")
    phases = c2.multiselect("Phase", period["phases"], key="enf_phase", placeholder="all")
    outcomes = c3.multiselect("Outcome", period["outcomes"], key="enf_outcome", placeholder="all")
    text = st.text_input("Job, reason or why contains", key="enf_text")
    audit = queries.AuditFilter(ctx.start, ctx.open_end, ctx.clusters, ctx.projects, tuple(actions), tuple(phases),
                                tuple(outcomes), text)
    counts = ui.enforcement_counts(ctx.path, audit) if audit != base else period
    a, b, c = st.columns(3)
    a.metric("Actions shown", ui.count(counts["rows_kept"], "row"))
    b.metric("Planned", ui.count(counts["rows_planned"], "row"))
    c.metric("Applied", ui.count(counts["rows_applied"], "row"))
    ui.restricted_note(ctx, "actions")
    per = queries.ENFORCEMENT_PAGE_ROWS
    pages = max(-(-counts["rows_kept"] // per), 1)
    number = st.number_input(f"Page (of {pages:,}; {per} rows a page, newest first)", min_value=1, max_value=pages,
                             value=1, step=1, key="enf_page") if pages > 1 else 1
    rows = ui.enforcement_page(ctx.path, audit, int(number) - 1)
    first = (int(number) - 1) * per
    st.caption(f"Rows {first + 1:,}–{first + rows.height:,} of {counts['rows_kept']:,}; the filters above are "
               "applied to every row, not only this page.")
    ui.table(rows, {
        # what was decided and what came of it first, so both fit beside the sidebar at 1,400 px
        "planned_at": ui.utc_col("cycle"), "job_name": "job", "action": "action", "phase": "phase",
        "outcome": "outcome", "reason": st.column_config.TextColumn("reason", width=270),
        "detail": st.column_config.TextColumn("why this outcome", width=230,
                                              help="applied rows: why it was done, refused or skipped (also in "
                                                   "`gpuledger enforce explain JOB`)"),
        "cause": "cause",
        "priority": ui.int_col("priority (scheduler units)"), "funded": st.column_config.CheckboxColumn("funded"),
        "dry_run": st.column_config.CheckboxColumn("dry run"), "mode": "mode", "project": "project",
        "job_id": "job id", "cluster": "cluster", "rule": "rule", "error": "error",
        "recorded_at": ui.utc_col("recorded", "YYYY-MM-DD HH:mm:ss")}, key="enf_rows", rows=20,
        download=f"enforcement-page-{int(number)}")
