from datetime import datetime, time

import polars as pl
import streamlit as st
from gpuledger.dashboards import charts, ui

ctx = ui.context()
if ctx is not None:
    st.title("Budgets")
    snap = ui.budgets_latest(ctx.path, ctx.end)
    if not snap.height:
        st.info("No budget figures up to the end of this period: run `gpuledger pipelines run-once`.")
        st.stop()
    as_of = snap["as_of"][0]
    st.caption(f"As of {as_of:%Y-%m-%d %H:%M} UTC (the period's end, or the data's newest moment before it; "
               "`gpuledger report budget` gives the same figures); budgets in normalised GPU-hours (GPU-hours × the rate card's "
               "model weight); burn rate over the last 7 days.")
    ui.filters_note("the period's end (as of when), the org node (its subtree)",
                    "clusters (a budget covers its node's jobs on every cluster)")
    # a lead sees their projects and the programs above them (org-level aggregates), not other teams
    keep = ui.visible_nodes(ctx)
    shown = snap.filter(pl.col("node").is_in(list(keep)))
    counts = {s: int((shown["status"] == s).sum()) for s in ("funded", "at-risk", "exhausted")}
    a, b, c = st.columns(3)
    a.metric("Funded", ui.count(counts["funded"], "node"))
    b.metric("At risk (exhausts before period end)", ui.count(counts["at-risk"], "node"))
    c.metric("Exhausted", ui.count(counts["exhausted"], "node"))
    ui.restricted_note(ctx, "budgets")

    ui.chart(charts.budget_vs_consumed(shown, "Budget vs consumed per node"))
    st.caption("How much of its budget each node (its jobs and its children's) has used so far this period.")
    # which budget (node and period) and where it stands first: they fit beside the sidebar at 1,400 px
    ui.table(shown, {
        "node": "org node", "period_start": st.column_config.DateColumn("period from"),
        "period_end": st.column_config.DateColumn("period to"), "status": "status",
        "remaining_gpu_hours": ui.norm_h("remaining"), "runs_out": ui.utc_col("runs out"),
        "left_at_period_end": ui.norm_h("left at period end"),
        "burn_gpu_hours_per_day": ui.number_col("burn (norm. GPU-h/day)"), "budget_gpu_hours": ui.norm_h("budget"),
        "consumed_gpu_hours": ui.norm_h("consumed"),
        "budget_own": st.column_config.CheckboxColumn("own budget")}, key="budget_table", download="budgets",
        rows=25)

    st.subheader("Burn-down")
    with_budget = shown.filter(pl.col("budget_gpu_hours").is_not_null())
    if with_budget.height:
        choice = st.selectbox("Node", with_budget["node"].to_list(), key="burn_node")
        row = with_budget.filter(pl.col("node") == choice).row(0, named=True)
        history = ui.budget_history(ctx.path, choice, row["period_start"], ctx.end)
        projection = pl.DataFrame({"as_of": [row["as_of"]], "remaining_gpu_hours": [row["remaining_gpu_hours"]]})
        if row["burn_gpu_hours_per_day"]:
            # drawn to where it runs out inside the period (0 left), else to the period's end (what is left then)
            end_at = row["runs_out"] or datetime.combine(row["period_end"], time())
            projection = pl.concat([projection, pl.DataFrame({"as_of": [end_at],
                                                              "remaining_gpu_hours": [row["left_at_period_end"]]})])
        ui.chart(charts.burn_down(history, projection, float(row["budget_gpu_hours"]),
                                  f"{choice}: remaining budget"))
        ex = row["runs_out"]
        st.caption(f"Solid: remaining budget at each daily snapshot; dashed: the 7-day burn rate carried forward "
                   f"({'runs out ' + f'{ex:%Y-%m-%d}' if ex else 'lasts the period at this rate'}; period ends "
                   f"{row['period_end']:%Y-%m-%d} with {row['left_at_period_end']:,.1f} normalised GPU-h left "
                   "at this rate).")
        st.markdown(
            f"**When {choice} runs out:** its jobs become *unfunded*. They keep running while GPUs would "
            "otherwise idle, but they lose the protection of their minimum runtime, enforcement lowers their "
            "priority below funded work, and they may be preempted when funded jobs are waiting. New jobs still "
            "queue; they start only on spare capacity until the next budget period.")
