import streamlit as st
from gpuledger.dashboards import charts, queries, ui

ctx = ui.context()
if ctx is not None:
    st.title("Fair share")
    tree = ui.fairshare_latest(ctx.path, ctx.end)
    if not tree.height:
        st.info("No fair-share snapshot up to the end of this period: run `gpuledger pipelines run-once`.")
        st.stop()
    as_of = tree["as_of"][0]
    st.caption(f"As of {as_of:%Y-%m-%d %H:%M} UTC; usage = allocated GPU-hours in the usage window and decayed "
               "(half-life), shares and usage normalised among siblings.")
    projects = tree.filter(tree["kind"] == "project")
    delivered = projects["gpu_hours_window"].sum()
    a, b, c = st.columns(3)
    a.metric("Projects ranked", f"{projects.height}")
    b.metric("GPU-hours in the window", ui.hours(delivered))
    root = tree.filter(tree["depth"] == 0)
    c.metric("Delivered of owed (org)", ui.pct(100 * root["delivery_ratio"][0])
             if root.height and root["delivery_ratio"][0] is not None else "–")

    st.subheader("The tree (like `sshare -l`)")
    indent = {r["node"]: "\u2003" * (r["depth"] or 0) + r["node"] for r in tree.iter_rows(named=True)}
    shown = tree.select("queue_order", "node", "kind", "shares_raw", "shares_norm", "gpu_hours_window",
                        "gpu_hours_decayed", "usage_norm", "level_fs", "fs_rank", "fairshare_factor",
                        "delivery_ratio", "occupancy_ratio").with_columns(
        tree["node"].replace_strict(indent).alias("node"))
    st.dataframe(shown, hide_index=True, column_config={
        "queue_order": st.column_config.NumberColumn("order"),
        "shares_raw": st.column_config.NumberColumn("shares (raw)"),
        "shares_norm": st.column_config.NumberColumn("share of parent (%)", format="percent"),
        "gpu_hours_window": st.column_config.NumberColumn("usage, window (GPU-h)", format="%.1f"),
        "gpu_hours_decayed": st.column_config.NumberColumn("usage, decayed (GPU-h)", format="%.1f"),
        "usage_norm": st.column_config.NumberColumn("usage of parent (%)", format="percent"),
        "level_fs": st.column_config.NumberColumn("level FS (s/u)", format="%.3f"),
        "fs_rank": st.column_config.NumberColumn("rank"),
        "fairshare_factor": st.column_config.NumberColumn("FS factor (0..1)", format="%.3f"),
        "delivery_ratio": st.column_config.NumberColumn("delivered of owed (%)", format="percent"),
        "occupancy_ratio": st.column_config.NumberColumn("occupancy (%)", format="percent")})

    history = ui.fairshare_history(ctx.path, ctx.start, ctx.end)
    history = ui.visible(history, ctx, "node")
    if history.height:
        st.altair_chart(charts.ratio_over_time(history, "delivery_ratio", "Delivery ratio per project",
                                               "delivered ÷ owed GPU-hours"), width="stretch")
        st.caption("Delivered GPU-hours over what the project's share owed it (capped at its demand); "
                   "the dashed line is 100 %.")

    st.subheader("Queue order: why is my project here")
    reasons = queries.queue_reasons(tree)
    st.dataframe(reasons, hide_index=True, column_config={
        "queue_position": st.column_config.NumberColumn("position"),
        "fairshare_factor": st.column_config.NumberColumn("FS factor (0..1)", format="%.3f"),
        "why": st.column_config.TextColumn("level by level: share vs usage among siblings → LF, place", width="large")})
    st.caption("Projects are served depth-first, siblings in descending level fair share (LF = share ÷ usage).")
