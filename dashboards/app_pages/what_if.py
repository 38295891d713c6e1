# /what-if: the scheduling what-if's policies side by side, read from a result file of
# `gpuledger whatif schedule --format json --out FILE` (format gpuledger.whatif.schedule/1): the newest one in
# $GPULEDGER_WHATIF_DIR (default reports/whatif/) or one the user uploads. Org-level aggregates only
# (projects and job classes, no jobs or users), so every signed-in role sees the whole page.
import streamlit as st
from gpuledger.dashboards import charts, queries, ui

ctx = ui.context()
if ctx is not None:
    st.title("What-if")
    st.caption("The same job trace replayed under each scheduling policy, side by side: what a choice of budgets, "
               "shares and reclaim rules would have delivered. The sidebar's filters do not apply: the file "
               "covers the range it was run on.")
    folder = queries.whatif_dir()
    uploaded = st.file_uploader("Or open another what-if result file (JSON)", type=["json"], key="whatif_upload")
    found = queries.newest_whatif(folder)
    if uploaded is not None:
        text, source = uploaded.getvalue().decode("utf-8", errors="replace"), f"uploaded file `{uploaded.name}`"
    elif found is not None:
        text, source = found.read_text(), f"`{found}`"
    else:
        st.info(f"No what-if result in `{folder}/` yet. Run\n\n`{queries.WHATIF_COMMAND}`\n\n"
                "(`make demo` does), or upload a file written by `gpuledger whatif schedule --format json --out FILE`; "
                "set `GPULEDGER_WHATIF_DIR` to read another folder.")
        st.stop()
    try:
        frames = ui.whatif_result(text)
    except (ValueError, KeyError, TypeError) as exc:
        st.warning(f"{source} is not a what-if schedule result: {exc}")
        st.stop()
    trace, titles = frames["trace"], frames["titles"]
    st.caption(f"From {source}: {trace['jobs']:,} jobs on {trace['physical_gpus']:,} GPUs, "
               f"{trace['start']} – {trace['end']} ({trace['hours']:,.0f} h)."
               + (f" {len(trace['skipped'])} jobs skipped." if trace.get("skipped") else ""))
    outcome = frames.get("outcome")
    if outcome is not None:
        seeds = outcome["seeds"]
        st.subheader("Outcome, as Ai2 measured it")
        # medians keep the five policies beside each other at 1,400 px; the ranges on request
        spread = len(seeds) > 1 and st.toggle("min–max over seeds", value=False,
                                              help="each cell as median [min–max] over the seeds")
        shown = outcome["ranges"] if spread else outcome["table"]
        st.dataframe(shown, hide_index=True, height=35 * (shown.height + 1) + 3,
                     column_config={"label": st.column_config.TextColumn("figure (unit)", width="medium"),
                                    "target": st.column_config.TextColumn("target", width="small")})
        over = (f"{'median [min–max]' if spread else 'median'} over {len(seeds)} seeds ({seeds[0]}–{seeds[-1]})"
                if len(seeds) > 1
                else f"one seed ({seeds[0] if seeds else '?'}): `--seeds 5` gives min, median and max")
        st.caption(f"{over}; {outcome['regime']}. Owed = a team's share of capacity capped hour by hour at its "
                   "demand; delivered = what it got up to that, settled per usage window; burst = allocated "
                   "GPU-hours above owed; ceiling = Σ min(owed, occupied) ÷ Σ owed per settlement week, the best "
                   "any order of the same occupied GPU-hours could deliver; with exempt work where it ran, the "
                   "best the rest could (exempt work is on top and never preempted: its hours above its team's "
                   "owed are no other team's). "
                   f"{outcome['target_note'][0].upper()}{outcome['target_note'][1:]}.")
    summary = frames["summary"]
    by_metric = {row["metric"]: row for row in summary.iter_rows(named=True)}

    def number(metric: str, policy: str) -> float | None:
        value = by_metric[metric][policy]
        return None if value in (None, "-") else float(value.replace(",", ""))

    # two short figures per policy so five policies fit beside each other at 1,400 px; the rest
    # (useful GPU-hours included) is in the side-by-side table below
    for column, (policy, title) in zip(st.columns(len(titles)), titles.items(), strict=True):
        column.markdown(f"**{title}** (`{policy}`)")
        worst = number("worst_delivery_ratio", policy)
        column.metric("worst project", ui.pct(None if worst is None else 100 * worst),
                      help=f"{policy}: the worst project's delivered ÷ owed GPU-hours "
                           f"({by_metric['worst_project'][policy]})")
        occupancy = number("occupancy_ratio", policy)
        column.metric("occupancy", ui.pct(None if occupancy is None else 100 * occupancy),
                      help=f"{policy}: allocated ÷ installed GPU-hours")

    st.subheader("Side by side")
    st.dataframe(summary.drop("metric").rename({p: t for p, t in titles.items() if p in summary.columns}),
                 hide_index=True, column_config={"label": st.column_config.TextColumn("figure (unit)", width="medium")})
    st.caption("Each figure carries its unit; GPU-h = one whole GPU held for one hour; useful = active GPU-hours of "
               "work kept; small = ≤ 1 GPU and ≤ 2 h, large = ≥ 8 GPUs.")

    delivery, waits = queries.whatif_long(frames)
    st.subheader("Delivered ÷ owed per project")
    if delivery.height:
        ui.chart(charts.whatif_delivery(delivery, "Delivered ÷ owed GPU-hours per project and policy"))
        st.caption("How much of the GPU time each project was owed (its share, capped by its demand) each policy "
                   "delivered; the dashed line is 100 %.")
        ui.table(delivery, {"project": "project", "policy": "policy",
                            "delivery_ratio": ui.number_col("delivered ÷ owed (ratio)", "%.3f"),
                            "owed_gpu_hours": ui.gpu_h("owed"), "delivered_gpu_hours": ui.gpu_h("delivered")},
                 key="whatif_delivery", download="whatif-delivery")
    else:
        st.caption("The file has no project delivery rows.")

    st.subheader("Waits by job class")
    ui.chart(charts.whatif_waits(waits, "Wait before start (hours): p90 bars, p50 ticks"))
    st.caption("How long jobs waited to start, per job class and policy: bars are the 90th percentile, black ticks "
               "the median; a job never started counts its wait so far.")

    sweep = frames["sweep"]
    if sweep is not None and sweep.height:
        parameter, on = frames["sweep_parameter"] or "value", frames["sweep_policy"] or "?"
        st.subheader(f"Sweep of {parameter} ({titles.get(on, on)})")
        ui.chart(charts.whatif_sweep(sweep, parameter, f"Delivered ÷ owed per {parameter} value"))
        st.caption(f"How the worst project's and all projects' delivered ÷ owed change as {parameter} changes, "
                   f"one run of policy {on} per value.")
        st.dataframe(sweep, hide_index=True)
