import polars as pl
import streamlit as st
from gpuledger.dashboards import ui

ctx = ui.context()
if ctx is not None:
    st.title("Enforcement")
    st.caption(f"Every planned and applied action whose cycle falls in {ctx.period_label}, newest first, with the "
               "reason a researcher reads.")
    rows = ui.visible(ui.enforcement(ctx.path, ctx.start, ctx.open_end, ctx.clusters), ctx)
    if not rows.height:
        st.info("No enforcement actions in this period. `gpuledger enforce plan` records a plan; "
                "`gpuledger enforce apply` acts on it (dry run unless `--yes`).")
        st.stop()
    c1, c2, c3 = st.columns(3)
    actions = c1.multiselect("Action", sorted(rows["action"].unique().to_list()), key="enf_action", placeholder="all")
    phases = c2.multiselect("Phase", sorted(rows["phase"].unique().to_list()), key="enf_phase", placeholder="all")
    outcomes = c3.multiselect("Outcome", sorted(rows["outcome"].unique().to_list()), key="enf_outcome", placeholder="all")
    text = st.text_input("Job or reason contains", key="enf_text")
    shown = rows
    for col, picked in (("action", actions), ("phase", phases), ("outcome", outcomes)):
        if picked:
            shown = shown.filter(pl.col(col).is_in(picked))
    if text:
        shown = shown.filter(pl.col("job_id").str.contains(text, literal=True)
                             | pl.col("reason").str.contains(text, literal=True))
    a, b, c = st.columns(3)
    a.metric("Actions shown", f"{shown.height} rows")
    b.metric("Planned", f"{int((shown['phase'] == 'planned').sum())} rows")
    c.metric("Applied", f"{int((shown['phase'] == 'applied').sum())} rows")
    ui.restricted_note(ctx, "actions")
    st.dataframe(shown, hide_index=True, column_config={
        "planned_at": st.column_config.DatetimeColumn("cycle (UTC)", format="YYYY-MM-DD HH:mm"),
        "recorded_at": st.column_config.DatetimeColumn("recorded (UTC)", format="YYYY-MM-DD HH:mm:ss"),
        "priority": st.column_config.NumberColumn("priority (scheduler units)"),
        "reason": st.column_config.TextColumn("reason", width="large")})
