import polars as pl
import streamlit as st
from gpuledger.dashboards import access, charts, queries, ui


def show_balance(ctx, keep: set) -> None:
    """The delivery balance (`gpuledger report balance`): what each project was owed and did not get,
    carried into the next settlement period, as bars per period and the running period's table."""
    balance, credited, days = ui.delivery_balance(ctx.path, ctx.end)
    st.subheader("Delivery balance: what the cluster still owes")
    if not balance.height:
        st.info("No jobs up to the end of this period: nothing owed yet.")
        return
    balance = balance.filter(pl.col("node").is_in(list(keep)))
    leaves = set(ctx.state.projects())
    owed = balance.filter(pl.col("node").is_in(list(leaves)))
    if owed["gpu_hours_balance"].sum() > 0:
        ui.chart(charts.balance_over_time(owed, f"Owed but not delivered at each {days:g}-day period's end (the running one: so far), per project"))
    else:
        st.success("Every project got what it was owed in every settlement period shown: no balance carried.")
    newest = balance.filter(pl.col("period_start") == pl.col("period_start").max())
    ui.table(newest.select("node", "gpu_hours_owed", "gpu_hours_allocated", "gpu_hours_carried_in",
                           "gpu_hours_delivered", "gpu_hours_above_due", "gpu_hours_balance"), {
        "node": st.column_config.TextColumn("org node", width="medium"),
        "gpu_hours_owed": ui.gpu_h("owed").explained("owed this period: its share of capacity, capped at its demand"),
        "gpu_hours_allocated": ui.gpu_h("allocated").explained("GPU-hours it held this period"),
        "gpu_hours_carried_in": ui.gpu_h("carried in").explained("owed but not delivered by the end of the last period"),
        "gpu_hours_delivered": ui.gpu_h("delivered").explained("allocated, up to owed + carried in"),
        "gpu_hours_above_due": ui.gpu_h("above due").explained("burst: allocated beyond owed + carried in"),
        "gpu_hours_balance": ui.gpu_h("balance").explained("owed + carried in − delivered: carried into the next period")},
        key="fs_balance", rows=max(newest.height, 1), download="delivery-balance")
    start = newest["period_start"][0]
    use = ("credited in the queue order above: a project's usage counts less what is still open of its carried "
           "balance" if credited else "not credited in the queue order (policy.usage.delivery_balance."
           "credit_fair_share: false)")
    st.caption(f"The running period began {start:%Y-%m-%d %H:%M} UTC; periods are {days:g}-day usage windows. "
               f"Allocation above what a period owes pays the carried balance back first; burst never makes it "
               f"negative. The balance is {use}. `gpuledger report balance --history` gives every period.")


ctx = ui.context()
if ctx is not None:
    st.title("Fair share")
    whole = ui.fairshare_latest(ctx.path, ctx.end)
    if not whole.height:
        st.info("No fair-share tree up to the end of this period: run `gpuledger pipelines run-once`.")
        st.stop()
    as_of = whole["as_of"][0]
    st.caption(f"As of {as_of:%Y-%m-%d %H:%M} UTC (the period's end, or the data's newest moment before it; "
               "`gpuledger report fairshare` gives the same tree); usage = allocated "
               "GPU-hours in the usage window and decayed (half-life), shares and usage normalised among siblings.")
    ui.filters_note("the period's end (as of when), the org node (its subtree and the nodes above it)",
                    "clusters (fair share is computed over the whole fleet)")
    # the chosen node's subtree, and its ancestors so the path from the root stays readable
    parent_of = ctx.state.parent_of
    keep = access.subtree(parent_of, ctx.node) if ctx.node else set(parent_of)
    up = parent_of.get(ctx.node) if ctx.node else None
    while up is not None:
        keep.add(up)
        up = parent_of.get(up)
    tree = whole.filter(pl.col("node").is_in(list(keep)))
    projects = tree.filter(pl.col("kind") == "project")
    delivered = projects["gpu_hours_window"].sum()
    a, b, c = st.columns(3)
    a.metric("Projects ranked", f"{projects.height}")
    b.metric("GPU-hours in the window", ui.hours(delivered))
    root = whole.filter(pl.col("depth") == 0)
    c.metric("Delivered of owed (org)", ui.pct(100 * root["delivery_ratio"][0])
             if root.height and root["delivery_ratio"][0] is not None else "–")

    st.subheader("The tree (like `sshare -l`)")
    indent = {r["node"]: "\u2003" * (r["depth"] or 0) + r["node"] for r in tree.iter_rows(named=True)}
    shown = tree.with_columns(pl.col("node").replace_strict(indent).alias("node"))
    # short headers (their meaning in each header's tooltip), so all eight columns fit beside the sidebar
    ui.table(shown, {
        "node": st.column_config.TextColumn("org node", width="medium"),
        "fs_rank": ui.int_col("rank").explained("place in the org's queue (1 = served first)"),
        "fairshare_factor": ui.number_col("FS factor", "%.3f").explained("Slurm's fair-share factor, 0..1"),
        "shares_norm": ui.ratio_col("share").explained("share of its parent's, normalised among siblings"),
        "usage_effective": ui.ratio_col("usage").explained("decayed usage, as a share of its parent's "
                                                           "(normalised among siblings, as share is)"),
        "level_fs": ui.number_col("level FS", "%,.3f").explained("share ÷ usage among siblings (above 1: under-served)"),
        "gpu_hours_window": ui.gpu_h("usage").explained("allocated GPU-hours in the usage window, not decayed"),
        "delivery_ratio": ui.ratio_col("delivered").explained("delivered of owed GPU-hours")},
        key="fs_tree", rows=max(tree.height, 1), download="fair-share-tree")
    st.caption("Decayed usage, raw shares and occupancy are in the CSV download.")

    history = ui.visible(ui.fairshare_history(ctx.path, ctx.start, ctx.end), ctx, "node")
    if history.height:
        ui.chart(charts.ratio_over_time(history, "delivery_ratio", "Delivery ratio per project",
                                        charts.axis_title("delivered ÷ owed GPU-hours", "%")))
        st.caption("Delivered GPU-hours over what the project's share owed it (capped at its demand); "
                   "the dashed line is 100 %.")

    show_balance(ctx, keep)

    st.subheader("Queue order: why is my project here")
    reasons = queries.queue_reasons(whole).filter(pl.col("project").is_in(list(keep)))
    ui.table(reasons, {
        "queue_position": ui.int_col("position"), "project": "project",
        "why": st.column_config.TextColumn("why: share vs usage of the parent → LF, place", width=560,
                                           help="level by level, from the org down: share and usage among siblings, "
                                                "LF = share ÷ usage, its place among them (the whole text on click)"),
        "fairshare_factor": ui.number_col("FS factor (0..1)", "%.3f")}, key="fs_queue", rows=max(reasons.height, 1))
    st.caption("Projects are served depth-first, siblings in descending level fair share (LF = share ÷ usage); "
               "positions are in the whole org's queue.")

    st.subheader("Wait times by project")
    visible = [n for n in keep if ctx.state.kind_of.get(n) == "project" or n in projects["node"].to_list()]
    waits = ui.waits(ctx.path, ctx.start, ctx.end, tuple(sorted(visible)), "project")
    if waits.height:
        ui.table(waits, ui.wait_columns("project"), key="fs_waits", rows=max(min(waits.height, 15), 1),
                 download="wait-times")
        st.caption("Seconds from submission to start of the jobs submitted in the period, per project (`gpuledger "
                   "report waits --cause` gives the same figures); jobs still waiting count with their wait so far.")
    else:
        st.caption("No job of these projects was submitted in this period.")
