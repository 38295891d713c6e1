"""Writing a statement's files: CSV and Parquet lines, the XLSX workbook, the HTML page and
manifest.json. Every file is a function of the statement alone (no wall clock, no host name, rows
in a full sort order, the workbook's dates and zip entry times set from the data), so regenerating
a statement for the same data and config gives byte-identical files."""

from __future__ import annotations

import json
import re
from importlib import resources
from pathlib import Path

import polars as pl

from gpuledger.analytics.carbon import carbon_sums
from gpuledger.reports.chart import stacked_bars
from gpuledger.reports.showback import render_showback_html, showback_lines, showback_sentences
from gpuledger.reports.statement.build import ORG_LINES, Statement
from gpuledger.reports.statement.focus import write_focus
from gpuledger.reports.statement.pdf import write_pdf
from gpuledger.reports.statement.workbook import header, one_currency, unit_totals, write_xlsx
from gpuledger.reports.table_files import html_rows, sha256_file, write_csv, write_parquet
from gpuledger.rules.billing import BILLED_KINDS, billed_kind

MANIFEST = "manifest.json"
HTML_LINE_COLUMNS = ["business_unit", "line_kind", "project", "gpu_model", "tier", "gpu_hours", "gpu_hours_active",
                     "efficiency_ratio", "amount", "correction_of", "note"]


def slug(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "_", name).strip("_") or "unit"


# --- HTML --------------------------------------------------------------------------------------

def _charts(st: Statement) -> tuple[str, str, str]:
    # corrections count toward the kind they correct, so the bars add up to the total owed
    billed = (st.lines.with_columns(line_kind=billed_kind())
              .filter(pl.col("line_kind").is_in(BILLED_KINDS) & pl.col("gpu_model").is_not_null()))
    by_mt = (billed.with_columns(mt=pl.col("gpu_model") + pl.lit(" / ") + pl.col("tier").fill_null("?"))
             .group_by("mt", "line_kind").agg(pl.col("gpu_hours").sum(), pl.col("amount").sum()).sort("mt"))
    cats = sorted(set(by_mt["mt"].to_list()))

    def series(col: str) -> list[tuple[str, list[float]]]:
        out = []
        for kind, label in (("charge", "charged"), ("idle", "idle")):
            got = {m: float(v) for m, k, v in by_mt.select("mt", "line_kind", col).iter_rows() if k == kind}
            out.append((label, [round(got.get(c, 0.0), 6) for c in cats]))
        return out

    currency = ", ".join(sorted(set(billed["currency"].drop_nulls().to_list()))) or "?"
    corrected = ", corrections included" if st.state.corrected else ""
    model = stacked_bars(f"GPU-hours by GPU model and tier (charged and idle{corrected})", cats,
                         series("gpu_hours"), unit="GPU-h")
    amount = stacked_bars(f"Amount by GPU model and tier ({currency}{corrected})", cats, series("amount"),
                          unit=currency)
    if st.history.height:
        months = sorted(set(st.history["period"].to_list()))
        hist = []
        for kind, label in (("charge", "charges"), ("idle", "idle"), ("corrections", "corrections")):
            got = {p: float(a) for p, k, a in st.history.group_by("period", "line_kind")
                   .agg(pl.col("amount").sum()).iter_rows() if k == kind}
            if got:
                hist.append((label, [round(got.get(m, 0.0), 2) for m in months]))
        history = stacked_bars(f"Month over month ({currency})", months, hist, unit=currency)
    else:
        history = ""
    return model, amount, history


def render_html(st: Statement) -> str:
    # lazy: optional extra gpuledger[reports]
    from jinja2 import Environment, StrictUndefined, select_autoescape
    from markupsafe import Markup  # lazy: optional extra gpuledger[reports]

    env = Environment(autoescape=select_autoescape(default=True, default_for_string=True),
                      undefined=StrictUndefined, keep_trailing_newline=True)
    template = env.from_string((resources.files("gpuledger.reports.statement") / "statement.html.j2").read_text())
    totals = unit_totals(st)
    currencies = sorted(set(totals["currency"].to_list()))
    unit_rows = []
    for name in st.sections:
        mine = totals.filter(pl.col("business_unit") == name)
        if mine.is_empty():
            continue
        hours, active = mine["gpu_hours"].sum(), mine["gpu_hours_active"].sum()
        known = hours - (mine["gpu_hours_unknown"].sum() or 0.0)  # efficiency over hours with activity data
        amounts = {c: a for c, a in mine.select("currency", "amount").iter_rows()}
        unit_rows.append({"name": "idle capacity and memo lines" if name == ORG_LINES else name, "total": False,
                          "gpu_hours": f"{hours:,.3f}", "active": f"{active:,.3f}" if name != ORG_LINES else "",
                          "efficiency": f"{active / known:.1%}" if known > 1e-9 and name != ORG_LINES else "",
                          "amounts": [f"{amounts[c]:,.2f}" if c in amounts else "" for c in currencies]})
    owed = st.totals()
    unit_rows.append({"name": "total owed", "total": True, "gpu_hours": f"{totals['gpu_hours'].sum():,.3f}",
                      "active": "", "efficiency": "",
                      "amounts": [f"{owed[c]:,.2f}" if c in owed else "" for c in currencies]})
    model, amount, history = _charts(st)
    energy_rows = _energy_rows(st)
    # the page's lines table: what a reader compares, in 1,280 px and on A4 portrait; every
    # column stays in the CSV / Parquet beside it
    line_cols = [c for c in HTML_LINE_COLUMNS if c in st.lines.columns]
    if st.lines["correction_of"].is_null().all():
        line_cols.remove("correction_of")
    sections = []
    for frame, title in ((st.by_partition, "GPU-hours by Slurm partition"), (st.by_host, "GPU-hours by host"),
                         (st.waits, "Wait times per project: jobs submitted in the month, submit → start (seconds; "
                                    "a job still waiting counts its wait so far)")):
        if frame.height:
            sections.append({"title": title, "columns": frame.columns, "rows": html_rows(frame)})
    title = f"GPU statement {st.period} — {st.scope}"
    return template.render(
        title=title, st=st, currencies=currencies, unit_rows=unit_rows,
        # every printed page's head and foot (CSS strings, so quoted here)
        page_head=Markup(_css_string(title)), page_state=Markup(_css_string(st.status)),
        chart_model=Markup(model), chart_amount=Markup(amount), chart_history=Markup(history), energy_rows=energy_rows,
        line_columns=[header(c, one_currency(st.lines)) for c in line_cols],
        line_rows=html_rows(st.lines.select(line_cols)), sections=[
            {**sec, "columns": [header(c) for c in sec["columns"]]} for sec in sections])


def _energy_rows(st: Statement) -> list[dict]:
    """The page's energy table: each business unit, its projects indented under it, the total;
    "unknown" where no figure is known (never 0)."""
    jobs = st.job_energy

    def row(name: str, frame: pl.DataFrame, total: bool = False) -> dict:
        got = frame.select(pl.col("gpu_hours").sum(), *carbon_sums()).row(0, named=True) if frame.height else {}

        def fmt(col: str, digits: int = 3) -> str:
            v = got.get(col)
            return "unknown" if v is None else f"{v:,.{digits}f}"

        return {"name": name, "total": total, "gpu_hours": f"{got.get('gpu_hours') or 0.0:,.3f}",
                "kwh": fmt("energy_kwh"), "facility": fmt("energy_kwh_facility"), "co2": fmt("kg_co2e"),
                "unknown": f"{got.get('gpu_hours_co2_unknown') or 0.0:,.3f}"}

    out = []
    for unit in [u for u in st.sections if u != ORG_LINES]:
        mine = jobs.filter(pl.col("business_unit") == unit)
        if not mine.height:
            continue
        out.append(row(unit, mine))
        for project in sorted(set(mine["project"].drop_nulls().to_list())):
            out.append(row(f" {project}", mine.filter(pl.col("project") == project)))
    out.append(row("total", jobs, total=True))
    return out


def _css_string(text: str) -> str:
    """``text`` as a CSS string literal (for @page's margin boxes): quotes and backslashes escaped,
    one line, no markup."""
    body = text.replace("\\", "\\\\").replace('"', '\\"').replace("\n", " ").replace("<", "\\3c ")
    return f'"{body}"'


def write_html(st: Statement, path: Path) -> Path:
    path.write_text(render_html(st))
    return path


# --- one statement's files, and the whole set --------------------------------------------------

def _statement_writers(st: Statement, stem: str) -> list[tuple[str, object]]:
    """(file name, writer of that file into a path) for each of the statement's files, in order."""
    writers = [lambda p: write_csv(st.lines, p), lambda p: write_parquet(st.lines, p),
               lambda p: write_xlsx(st, p), lambda p: write_html(st, p), lambda p: write_focus(st, p),
               lambda p: write_csv(st.job_energy, p)]
    by_partition, by_host = st.by_partition, st.by_host
    if by_partition.height:
        writers.append(lambda p: write_csv(by_partition, p))
    if by_host.height:
        writers.append(lambda p: write_csv(by_host, p))
    names = file_names(stem, by_partition=bool(by_partition.height), by_host=bool(by_host.height))
    return list(zip(names, writers, strict=True))


def file_names(stem: str, *, by_partition: bool, by_host: bool) -> list[str]:
    """The names of a statement's files, in order: lines as CSV, Parquet, XLSX, HTML and FOCUS
    (reports/statement/focus.py), energy and emissions per job, then GPU-hours by Slurm partition and by host where the statement has any."""
    return [f"{stem}.csv", f"{stem}.parquet", f"{stem}.xlsx", f"{stem}.html", f"{stem}-focus.csv",
            f"{stem}-energy-by-job.csv",
            *([f"{stem}-by-partition.csv"] if by_partition else []), *([f"{stem}-by-host.csv"] if by_host else [])]


def write_statement_files(st: Statement, folder: Path, stem: str) -> list[Path]:
    folder.mkdir(parents=True, exist_ok=True)
    return [write(folder / name) for name, write in _statement_writers(st, stem)]


def write_statement_set(st: Statement, out: Path, *, per_unit: bool = True, pdf: bool = False,
                        showback: str | None = None, focus_only: bool = False) -> dict:
    """The statement's files in ``out`` (``statement-<period>-<scope>.*``), with ``per_unit`` each
    business unit's in ``out/units/<unit>/``, and ``out/manifest.json``. With ``pdf`` the HTML is
    printed to ``statement-<period>-<scope>.pdf`` too (headless Chromium, reports/statement/pdf.py; the
    scope's statement only). ``focus_only``: the FOCUS file alone (``report statement --format
    focus``), with its manifest. Returns the manifest."""
    out.mkdir(parents=True, exist_ok=True)
    stem = f"statement-{st.period}-{slug(st.scope)}"
    if focus_only:
        files = [write_focus(st, out / f"{stem}-focus.csv")]
        per_unit, pdf, showback = False, False, None
    else:
        files = write_statement_files(st, out, stem)
    shown: list[str] = []
    if showback:  # an extra view, never the ledger: the statement's files are unchanged

        frame = showback_lines(st, showback)
        shown = showback_sentences(frame)
        sb_stem = f"showback-{showback}-{st.period}-{slug(st.scope)}"
        files.append(write_csv(frame, out / f"{sb_stem}.csv"))
        (out / f"{sb_stem}.html").write_text(render_showback_html(st, frame, showback))
        files.append(out / f"{sb_stem}.html")
    if pdf:
        files.append(write_pdf(out / f"{stem}.html", out / f"{stem}.pdf", stamp=st.billed_through.replace(microsecond=0)))
    if per_unit:
        for unit in st.units:
            files += write_statement_files(st.for_unit(unit), out / "units" / slug(unit),
                                           f"statement-{st.period}-{slug(unit)}")
    manifest = {
        "period": st.period, "scope": st.scope,
        "period_start": f"{st.period_start:%Y-%m-%dT%H:%M:%S}Z", "period_end": f"{st.period_end:%Y-%m-%dT%H:%M:%S}Z",
        "status": st.state.token, "status_text": st.status, "status_sentence": st.status_sentence,
        "closed": st.closed, "provisional": st.provisional, "corrected": st.state.corrected,
        "revision": st.revision, "no_data": st.empty,
        "config_version": st.config_version, "data_through": f"{st.billed_through:%Y-%m-%dT%H:%M:%S}Z",
        "business_units": st.units,
        "totals": {c: str(a) for c, a in st.totals().items()},
        "reconciliation": [{"currency": r.currency, "charges": str(r.charges), "idle": str(r.idle),
                            "corrections": str(r.corrections), "total": str(r.total),
                            "capacity_amount": None if r.capacity_amount is None else str(r.capacity_amount),
                            "over_allocated": str(r.over_allocated), "reconciles": r.reconciles,
                            "statement": r.sentence()} for r in st.reconciliation],
        "reconciliation_per_pool": [
            {"currency": p.currency, "gpu_model": p.gpu_model, "tier": p.tier, "billed": str(p.billed),
             "capacity_gpu_hours": round(p.capacity_gpu_hours, 6), "capacity_amount": str(p.capacity_amount),
             "over_allocated": str(p.over_allocated), "capacity_unknown": str(p.capacity_unknown),
             "difference": str(p.difference), "statement": p.sentence()}
            for p in st.pools],
        **({"showback": {"basis": showback, "per_pool": shown}} if showback else {}),
        "files": [{"path": p.relative_to(out).as_posix(), "sha256": sha256_file(p), "bytes": p.stat().st_size}
                  for p in sorted(files, key=lambda p: p.relative_to(out).as_posix())],
    }
    (out / MANIFEST).write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n")
    return manifest
