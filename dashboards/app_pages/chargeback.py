import polars as pl
import streamlit as st
from gpuledger.dashboards import charts, queries, ui

MIME = {".csv": "text/csv", ".parquet": "application/vnd.apache.parquet",
        ".xlsx": "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet", ".html": "text/html"}

FORMATS = {".csv": "CSV", ".parquet": "Parquet", ".xlsx": "Excel (XLSX)", ".html": "HTML"}


def LINE_COLUMNS(currency):  # noqa: N802 - a table's columns, by the currency of its amounts
    cols = {"project": "project", "amount": ui.money_col("amount", currency), "line_kind": "line",
            "gpu_model": "GPU model", "tier": "tier", "gpu_hours": ui.gpu_h("allocated", 2),
            "gpu_hours_active": ui.gpu_h("active", 2), "efficiency_ratio": ui.ratio_col("efficiency"),
            "idle_amount_included": ui.money_col("idle spread in", currency), "billed": st.column_config.CheckboxColumn("billed"),
            "currency": "currency"}
    return cols


def _columns(frame, currency):
    return {k: v for k, v in LINE_COLUMNS(currency).items() if k in frame.columns}


def download_label(name: str, stem: str) -> str:
    """ "CSV", "CSV (lines)", "Excel (XLSX)": the format first, then what the file holds past the stem."""
    ext = name[name.rfind("."):]
    what = name[len(stem):-len(ext)].strip("-_ ") if name.startswith(stem) else ""
    fmt = FORMATS.get(ext, ext.lstrip(".").upper())
    return f"Download {fmt}" + (f" ({what.replace('-', ' ')})" if what else "")


ctx = ui.context()
if ctx is not None:
    st.title("Chargeback")
    ui.filters_note("the org node (its subtree's lines); the period in \"the sidebar's period\" mode",
                    "clusters (a statement bills the whole month on every cluster)")
    mode = st.radio("Show", ["the month's statement", "the sidebar's period (lines only)"], horizontal=True,
                    key="cb_mode")
    if mode.startswith("the sidebar"):
        whole = ctx.viewer.sees_everything and ctx.node in (None, ctx.state.root)
        lines = ui.chargeback_period(ctx.path, ctx.start, ctx.end, None if whole else ctx.projects)
        billed = lines.filter(pl.col("billed") & pl.col("currency").is_not_null()) if lines.height else lines
        totals = billed.group_by("currency").agg(pl.col("amount").sum()).sort("currency") if billed.height else billed
        st.caption(f"Chargeback lines for {ctx.period_label} ({'the whole org' if whole else ', '.join(ctx.projects)}), "
                   "computed now by the ledger's rules; monthly statements are what finance is billed from.")
        st.metric("Total", " + ".join(ui.money(r["amount"], r["currency"]) for r in totals.iter_rows(named=True))
                  if totals.height else "0.00")
        ui.table(lines, _columns(lines, totals["currency"][0] if totals.height else None),
                 key="cb_period_lines", download="chargeback-lines")
        st.caption("Allocated GPU-hours × price (model, tier, as of each hour); idle capacity on its own line "
                   "for the whole org.")
        st.stop()
    periods = sorted(set(ctx.state.periods) | set(queries.months_between(ctx.start, ctx.end)), reverse=True)
    period = st.selectbox("Month", periods, key="cb_period")
    root = ctx.state.root
    if ctx.viewer.sees_everything:
        node = None if ctx.node in (None, root) else ctx.node
    elif ctx.viewer.led_nodes:
        node = st.selectbox("Your node", list(ctx.viewer.led_nodes), key="cb_node")
    else:
        node = None
    if not ctx.viewer.sees_everything and not ctx.viewer.led_nodes:
        org = ui.statement(ctx.path, period, None)
        st.metric("Org total", " + ".join(ui.money(a, c) for c, a in org.totals.items()) or "–")
        st.info("Statement lines are shown to finance, admins and team leads (for their own projects).")
        st.stop()
    view = ui.statement(ctx.path, period, node)
    st.caption(f"Statement {view.period} for {view.scope}: **{view.status}**, data through "
               f"{view.billed_through:%Y-%m-%d %H:%M} UTC. Amounts are exact (cents, rounded half-up once).")
    cols = st.columns(3)
    cols[0].metric("Total billed", " + ".join(ui.money(a, c) for c, a in view.totals.items()) or "–")
    cols[1].metric("Status", "closed" if view.closed else "provisional" if view.provisional else "open")
    if view.reconciles is None:
        cols[2].metric("Reconciliation", "org only", help="checked to the cent on the whole org's statement")
    else:
        cols[2].metric("Reconciliation (to the cent)", "reconciles" if view.reconciles else "DOES NOT reconcile")
    if not ctx.viewer.sees_everything:
        org = ui.statement(ctx.path, period, None)
        st.caption("Org total (all teams): " + " + ".join(ui.money(a, c) for c, a in org.totals.items()))
    for sentence in view.reconciliation:
        st.caption(sentence)
    for note in view.notes:
        st.caption(note)

    lines = view.lines
    billed = queries.billed_lines(lines)
    if billed.height:
        currency = billed["currency"][0]
        bars = (billed.filter(pl.col("currency") == currency)
                .group_by("line_kind", "project").agg(pl.col("amount").sum().cast(pl.Float64), pl.col("gpu_hours").sum())
                .with_columns(label=pl.col("project").fill_null("(idle)")))
        ui.chart(charts.amount_bars(bars, "Amount per project", currency))
        st.caption("What each project owes this month (idle capacity is the org's own line).")
        by_model = (billed.group_by("gpu_model", "tier", "line_kind", "currency")
                    .agg(pl.col("gpu_hours").sum(), pl.col("amount").sum()).sort("gpu_model", "tier", "line_kind"))
        st.subheader("By GPU model and tier")
        ui.table(by_model, {"gpu_model": "GPU model", "tier": "tier", "line_kind": "line",
                            "amount": ui.money_col("amount", currency), "gpu_hours": ui.gpu_h("allocated", 2),
                            "currency": "currency"}, key="cb_by_model")
    st.subheader("Lines")
    kinds = sorted(lines["line_kind"].unique().to_list()) if lines.height else []
    pick = st.multiselect("Line kinds", kinds, default=kinds, key="cb_kinds")
    picked = lines.filter(pl.col("line_kind").is_in(pick))
    ui.table(picked, _columns(picked, next(iter(view.totals), None)), key="cb_lines")
    st.caption("Unpriced, over-allocated and capacity-unknown lines are memo lines: shown, not billed.")
    if billed.height and "kg_co2e" in lines.columns:
        st.subheader("Energy and emissions")
        energy = queries.energy_by_project(lines)
        ui.table(energy, {"business_unit": "business unit", "project": "project",
                          "gpu_hours": ui.gpu_h("allocated", 2), "facility_kwh": "facility energy (kWh)",
                          "kg_co2e": "emissions (kgCO2e)", "gpu_hours_co2_unknown": ui.gpu_h("emissions unknown", 2)},
                 key="cb_energy")
        st.caption("Facility kWh = the GPUs' own energy counter × the site's PUE; kgCO2e = facility kWh × the site's "
                   "grid intensity in each hour. \"unknown\" where no GPU reported energy or the site has no PUE / "
                   "intensity (never 0); the GPU-hours left out of kgCO2e are counted apart. Per job in the "
                   "energy-by-job CSV below.")
    st.subheader("Downloads (identical to the finance statement files)")
    stem = f"statement-{view.period}-{queries.file_slug(view.scope)}"
    row = st.container(horizontal=True)
    for name in sorted(view.file_names, key=lambda n: (len(n), n)):  # written when one is clicked
        row.download_button(download_label(name, stem), lambda n=name: view.files[n], file_name=name, help=name,
                            mime=MIME.get(name[name.rfind("."):], "application/octet-stream"), key=f"dl_{name}",
                            on_click="ignore")
