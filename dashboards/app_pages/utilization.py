import polars as pl
import streamlit as st
from gpuledger.dashboards import charts, queries, ui

ctx = ui.context()
if ctx is not None:
    st.title("Utilization")
    st.caption(f"{ctx.period_label}; allocated = held by a job (what is charged), active = GPU busy.")
    hourly = ui.utilization(ctx.path, ctx.start, ctx.end, ctx.clusters)
    if not hourly.height:
        st.info("No utilization rows in this period: pick another period, or run `gpuledger pipelines run-once`.")
        st.stop()
    totals = queries.utilization_totals(hourly)
    a, b, c, d = st.columns(4)
    a.metric("Allocated of capacity", ui.pct(totals["allocation_pct"]))
    b.metric("Active of capacity", ui.pct(totals["active_pct"]))
    c.metric("Active of allocated", ui.pct(totals["active_of_allocated_pct"]))
    d.metric("Unallocated capacity", ui.hours(totals["gpu_hours_unallocated"]))
    st.caption(f"Capacity {ui.hours(totals['gpu_hours_capacity'])}, allocated {ui.hours(totals['gpu_hours_allocated'])}, "
               f"active {ui.hours(totals['gpu_hours_active'])} over the period.")

    by = st.radio("Split by", ["cluster", "GPU model", "fleet"], horizontal=True, key="util_by")
    key = {"cluster": "cluster", "GPU model": "model", "fleet": None}[by]
    st.altair_chart(charts.pct_over_time(queries.utilization_by(hourly, key), key, "Allocated and active % of capacity"),
                    width="stretch")
    st.caption("Solid: share of installed GPUs held by jobs each hour; dashed: share actually busy.")

    kinds = ui.usage_by_kind(ctx.path, ctx.start, ctx.end, ctx.clusters)
    if kinds.height:
        measure = st.radio("Workload kinds: measure", ["allocated", "active"], horizontal=True, key="kind_measure")
        st.altair_chart(charts.stacked_hours(queries.kind_pct(kinds, hourly), f"{measure}_pct", "kind",
                                             f"{measure.capitalize()} % of capacity by workload kind",
                                             f"{measure} (% of installed capacity)"), width="stretch")
        st.caption(f"How the {'held' if measure == 'allocated' else 'busy'} share of the installed GPUs splits "
                   "between training, fine-tuning, batch, inference and interactive work.")
        per_kind = kinds.group_by("kind").agg(pl.col("gpu_hours_allocated").sum(), pl.col("gpu_hours_active").sum()).with_columns(
            active_of_allocated_pct=100 * pl.col("gpu_hours_active") / pl.col("gpu_hours_allocated")).sort("kind")
        st.dataframe(per_kind, hide_index=True, column_config={
            "gpu_hours_allocated": st.column_config.NumberColumn("allocated (GPU-h)", format="%.1f"),
            "gpu_hours_active": st.column_config.NumberColumn("active (GPU-h)", format="%.1f"),
            "active_of_allocated_pct": st.column_config.NumberColumn("active of allocated (%)", format="%.1f")})

    devices = ui.device_hours(ctx.path, ctx.start, ctx.end, ctx.clusters, ctx.state.data_now, ctx.idle_below)
    mig = queries.mig_summary(devices)
    st.subheader("MIG slices")
    if mig.height:
        st.dataframe(mig, hide_index=True, column_config={
            "instances": st.column_config.NumberColumn("instances"),
            "gpu_equivalents": st.column_config.NumberColumn("GPU equivalents (compute slices)", format="%.2f"),
            "gpu_hours_held": st.column_config.NumberColumn("held (GPU-h)", format="%.1f"),
            "held_pct": st.column_config.NumberColumn("held of their capacity (%)", format="%.1f")})
        st.caption("MIG instances count by compute slices (1g = 1/7 of an A100/H100).")
    else:
        st.caption("No MIG instances in these clusters.")

    st.subheader("Who holds idle GPUs")
    limit = st.slider("Devices shown (most held-idle hours first)", 8, 128, 48, step=8, key="heat_limit")
    shown, total = queries.heatmap_devices(devices, limit)
    idle_hours = int((devices["state"] == "held, idle").sum()) if devices.height else 0
    st.metric("Device-hours held while idle", f"{idle_hours:,} device-h")
    if shown.height:
        st.altair_chart(charts.device_heatmap(shown, f"Devices × hours ({shown['device'].n_unique()} of {total})"),
                        width="stretch")
        st.caption(f"Red: a job held the device but it stayed under {ctx.idle_below:.0%} activity for the hour; "
                   "green: held and busy; grey: free.")
