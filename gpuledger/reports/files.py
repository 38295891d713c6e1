"""Writing a statement's files: CSV and Parquet lines, the XLSX workbook, the HTML page and
manifest.json. Every file is a function of the statement alone (no wall clock, no host name, rows
in a full sort order, the workbook's dates and zip entry times set from the data), so regenerating
a statement for the same data and config gives byte-identical files."""

from __future__ import annotations

import hashlib
import io
import json
import re
import zipfile
from datetime import datetime
from decimal import Decimal
from importlib import resources
from pathlib import Path

import polars as pl

from gpuledger.rules.billing import billed as is_billed
from gpuledger.rules.billing import billed_kind

from gpuledger.reports.chart import stacked_bars
from gpuledger.reports.statement import ORG_LINES, UNASSIGNED, Statement

MANIFEST = "manifest.json"
HOUR_COLS = ("gpu_hours", "gpu_hours_active", "gpu_hours_unknown")


def _slug(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "_", name).strip("_") or "unit"


def sha256_file(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


# --- CSV / Parquet -----------------------------------------------------------------------------

def write_csv(frame: pl.DataFrame, path: Path) -> Path:
    # 6 decimals: GPU-hours to 3.6 ms; money columns are decimals and print exactly
    path.write_text(frame.write_csv(float_precision=6, datetime_format="%Y-%m-%dT%H:%M:%S"))
    return path


def write_parquet(frame: pl.DataFrame, path: Path) -> Path:
    frame.write_parquet(path, compression="zstd", statistics=True)
    return path


# --- XLSX --------------------------------------------------------------------------------------

class _FixedTimeZip(zipfile.ZipFile):
    """openpyxl writes entries by name, which stamps each with the wall clock; stamp them with
    the statement's own time instead."""

    fixed_time: tuple[int, int, int, int, int, int] = (1980, 1, 1, 0, 0, 0)

    def writestr(self, zinfo_or_arcname, data, compress_type=None, compresslevel=None):
        if not isinstance(zinfo_or_arcname, zipfile.ZipInfo):
            info = zipfile.ZipInfo(zinfo_or_arcname, date_time=self.fixed_time)
            info.compress_type = zipfile.ZIP_DEFLATED
            info.external_attr = 0o600 << 16
            zinfo_or_arcname = info
        return super().writestr(zinfo_or_arcname, data, compress_type, compresslevel)

    def write(self, filename, arcname=None, compress_type=None, compresslevel=None):
        # worksheets go through a temporary file, whose mtime would be the entry's time
        with open(filename, "rb") as fh:
            data = fh.read()
        return self.writestr(arcname or Path(filename).name, data)


def _sheet_name(name: str, used: set[str]) -> str:
    base = re.sub(r"[\[\]:*?/\\]", "_", name)[:31] or "unit"
    candidate, n = base, 2
    while candidate.lower() in used:
        suffix = f" ({n})"
        candidate, n = base[:31 - len(suffix)] + suffix, n + 1
    used.add(candidate.lower())
    return candidate


def _money_format(currency: str | None) -> str:
    return f'#,##0.00 "{currency}"' if currency else "#,##0.00"


def _write_table(ws, frame: pl.DataFrame, start_row: int, *, total_label: str | None = None) -> int:
    """Write ``frame`` (header + rows) at ``start_row``; numbers stay numbers (money as Decimal with
    a currency format, GPU-hours with 3 decimals). Returns the next free row."""
    from openpyxl.styles import Font

    bold = Font(bold=True)
    for j, name in enumerate(frame.columns, start=1):
        ws.cell(row=start_row, column=j, value=name).font = bold
    r = start_row + 1
    cur_col = frame.columns.index("currency") if "currency" in frame.columns else None
    for row in frame.iter_rows():
        for j, value in enumerate(row, start=1):
            name = frame.columns[j - 1]
            if isinstance(value, datetime):
                value = value.strftime("%Y-%m-%d %H:%M")
            cell = ws.cell(row=r, column=j, value=value)
            if isinstance(value, Decimal):
                cell.number_format = _money_format(row[cur_col] if cur_col is not None else None)
            elif name in HOUR_COLS:
                cell.number_format = "#,##0.000"
            elif name == "efficiency_ratio":
                cell.number_format = "0.0%"
        r += 1
    if total_label is not None and "amount" in frame.columns:
        billed = frame.filter(is_billed(frame)) if "line_kind" in frame.columns else frame
        sums = billed.group_by("currency").agg(pl.col("amount").sum(), pl.col("gpu_hours").sum()).sort("currency")
        for currency, amount, hours in sums.iter_rows():
            ws.cell(row=r, column=1, value=total_label).font = bold
            if "currency" in frame.columns:
                ws.cell(row=r, column=frame.columns.index("currency") + 1, value=currency)
            hc = ws.cell(row=r, column=frame.columns.index("gpu_hours") + 1, value=round(hours or 0.0, 6))
            hc.number_format = "#,##0.000"
            ac = ws.cell(row=r, column=frame.columns.index("amount") + 1, value=Decimal(amount))
            ac.number_format, ac.font = _money_format(currency), bold
            r += 1
    return r + 1


SHEET_COLUMNS = ["line_kind", "project", "gpu_model", "tier", "currency", "gpu_hours", "gpu_hours_active",
                 "gpu_hours_unknown", "efficiency_ratio", "amount", "revision", "correction_of", "note"]


def unit_totals(st: Statement) -> pl.DataFrame:
    """Per business unit (and the org's own idle / memo lines) and currency: GPU-hours and amount
    of the billed lines."""
    billed = st.lines.filter(is_billed(st.lines) & pl.col("currency").is_not_null())
    order = {u: i for i, u in enumerate(st.sections)}
    return (billed.group_by("business_unit", "currency")
            .agg(pl.col("gpu_hours").sum().round(6), pl.col("gpu_hours_active").sum().round(6),
                 pl.col("gpu_hours_unknown").sum().round(6), pl.col("amount").sum())
            .with_columns(_o=pl.col("business_unit").replace_strict(order, default=len(order), return_dtype=pl.Int32))
            .sort("_o", "business_unit", "currency").drop("_o"))


def write_xlsx(st: Statement, path: Path) -> Path:
    """A summary sheet (status, reconciliation, totals per business unit) and one sheet per
    business unit with its lines and its total; the org's idle and memo lines on their own sheet."""
    from openpyxl import Workbook
    from openpyxl.styles import Font

    wb = Workbook()
    stamp = st.billed_through.replace(microsecond=0)
    wb.properties.creator = "gpuledger"
    wb.properties.title = f"gpuledger statement {st.period} {st.scope}"
    wb.properties.created = wb.properties.modified = stamp
    used: set[str] = set()
    ws = wb.active
    ws.title = _sheet_name("Summary", used)
    rows = [("statement", f"{st.scope} {st.period}"), ("status", st.status),
            ("period", f"{st.period_start:%Y-%m-%d} .. {st.period_end:%Y-%m-%d} (UTC, end exclusive)"),
            ("data through", f"{st.billed_through:%Y-%m-%d %H:%M} UTC"),
            ("config version", st.config_version)]
    rows += [("reconciliation", r.sentence()) for r in st.reconciliation]
    rows += [("note", n) for n in st.notes] + [("warning", w) for w in st.warnings]
    for i, (k, v) in enumerate(rows, start=1):
        ws.cell(row=i, column=1, value=k).font = Font(bold=True)
        ws.cell(row=i, column=2, value=v)
    nxt = _write_table(ws, unit_totals(st), len(rows) + 2)
    totals = st.totals()
    for currency, amount in totals.items():
        ws.cell(row=nxt, column=1, value="total owed").font = Font(bold=True)
        ws.cell(row=nxt, column=2, value=currency)
        c = ws.cell(row=nxt, column=5, value=amount)
        c.number_format, c.font = _money_format(currency), Font(bold=True)
        nxt += 1
    ws.column_dimensions["A"].width = 18
    ws.column_dimensions["B"].width = 24
    for unit in st.sections:
        frame = st.unit_lines(unit).select(SHEET_COLUMNS)
        title = {ORG_LINES: "Idle and memo", UNASSIGNED: "Projects outside the tree"}.get(unit, unit)
        sheet = wb.create_sheet(_sheet_name(title, used))
        _write_table(sheet, frame, 1, total_label="total")
        sheet.column_dimensions["B"].width = 22
    for extra, title in ((st.by_partition, "By partition"), (st.by_host, "By host")):
        if extra.height:
            _write_table(wb.create_sheet(_sheet_name(title, used)), extra, 1)
    from openpyxl.writer.excel import ExcelWriter

    buffer = io.BytesIO()
    archive = _FixedTimeZip(buffer, "w", zipfile.ZIP_DEFLATED, allowZip64=True)
    archive.fixed_time = (stamp.year, stamp.month, stamp.day, stamp.hour, stamp.minute, stamp.second - stamp.second % 2)
    ExcelWriter(wb, archive).save()  # not save_workbook: it stamps `modified` with the wall clock
    path.write_bytes(buffer.getvalue())
    return path


# --- HTML --------------------------------------------------------------------------------------

def _cell(value, name: str) -> dict:
    if value is None:
        return {"text": "", "num": False}
    if isinstance(value, Decimal):
        return {"text": f"{value:,.2f}", "num": True}
    if isinstance(value, bool):
        return {"text": "yes" if value else "no", "num": False}
    if isinstance(value, float):
        return {"text": f"{value:.1%}" if name == "efficiency_ratio" else f"{value:,.3f}", "num": True}
    if isinstance(value, int):
        return {"text": str(value), "num": True}
    if isinstance(value, datetime):
        return {"text": f"{value:%Y-%m-%d %H:%M}", "num": False}
    return {"text": str(value), "num": False}


def _rows(frame: pl.DataFrame) -> list[list[dict]]:
    return [[_cell(v, frame.columns[i]) for i, v in enumerate(row)] for row in frame.iter_rows()]


def _charts(st: Statement) -> tuple[str, str, str]:
    # corrections count as the kind of line they correct (a closed month's charts move with them)
    billed = st.lines.filter(is_billed(st.lines) & pl.col("gpu_model").is_not_null())
    if "correction_of" in billed.columns:
        billed = billed.with_columns(line_kind=billed_kind())
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
    model = stacked_bars("GPU-hours by GPU model and tier (charged and idle)", cats, series("gpu_hours"),
                         unit="GPU-h")
    amount = stacked_bars(f"Amount by GPU model and tier ({currency})", cats, series("amount"), unit=currency)
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
    from jinja2 import Environment, StrictUndefined, select_autoescape
    from markupsafe import Markup

    env = Environment(autoescape=select_autoescape(default=True, default_for_string=True),
                      undefined=StrictUndefined, keep_trailing_newline=True)
    template = env.from_string((resources.files("gpuledger.reports") / "statement.html.j2").read_text())
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
    line_cols = [c for c in st.lines.columns if c not in ("period", "provisional")]
    sections = []
    for frame, title in ((st.by_partition, "GPU-hours by Slurm partition"), (st.by_host, "GPU-hours by host")):
        if frame.height:
            sections.append({"title": title, "columns": frame.columns, "rows": _rows(frame)})
    return template.render(
        title=f"GPU statement {st.period} — {st.scope}", st=st, currencies=currencies, unit_rows=unit_rows,
        chart_model=Markup(model), chart_amount=Markup(amount), chart_history=Markup(history),
        line_columns=line_cols, line_rows=_rows(st.lines.select(line_cols)), sections=sections)


def write_html(st: Statement, path: Path) -> Path:
    path.write_text(render_html(st))
    return path


# --- one statement's files, and the whole set --------------------------------------------------

def write_statement_files(st: Statement, folder: Path, stem: str) -> list[Path]:
    folder.mkdir(parents=True, exist_ok=True)
    files = [write_csv(st.lines, folder / f"{stem}.csv"), write_parquet(st.lines, folder / f"{stem}.parquet"),
             write_xlsx(st, folder / f"{stem}.xlsx"), write_html(st, folder / f"{stem}.html")]
    if st.by_partition.height:
        files.append(write_csv(st.by_partition, folder / f"{stem}-by-partition.csv"))
    if st.by_host.height:
        files.append(write_csv(st.by_host, folder / f"{stem}-by-host.csv"))
    return files


def write_statement_set(st: Statement, out: Path, *, per_unit: bool = True) -> dict:
    """The statement's files in ``out`` (``statement-<period>-<scope>.*``), with ``per_unit`` each
    business unit's in ``out/units/<unit>/``, and ``out/manifest.json``. Returns the manifest."""
    out.mkdir(parents=True, exist_ok=True)
    files = write_statement_files(st, out, f"statement-{st.period}-{_slug(st.scope)}")
    if per_unit:
        for unit in st.units:
            files += write_statement_files(st.for_unit(unit), out / "units" / _slug(unit),
                                           f"statement-{st.period}-{_slug(unit)}")
    manifest = {
        "period": st.period, "scope": st.scope,
        "period_start": f"{st.period_start:%Y-%m-%dT%H:%M:%S}Z", "period_end": f"{st.period_end:%Y-%m-%dT%H:%M:%S}Z",
        "status": "closed" if st.closed else ("provisional" if st.provisional else "open"),
        "closed": st.closed, "provisional": st.provisional, "revision": st.revision,
        "config_version": st.config_version, "data_through": f"{st.billed_through:%Y-%m-%dT%H:%M:%S}Z",
        "business_units": st.units,
        "totals": {c: str(a) for c, a in st.totals().items()},
        "reconciliation": [{"currency": r.currency, "charges": str(r.charges), "idle": str(r.idle),
                            "corrections": str(r.corrections), "total": str(r.total),
                            "capacity_amount": None if r.capacity_amount is None else str(r.capacity_amount),
                            "over_allocated": str(r.over_allocated), "reconciles": r.reconciles,
                            "statement": r.sentence()} for r in st.reconciliation],
        "files": [{"path": p.relative_to(out).as_posix(), "sha256": sha256_file(p), "bytes": p.stat().st_size}
                  for p in sorted(files, key=lambda p: p.relative_to(out).as_posix())],
    }
    (out / MANIFEST).write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n")
    return manifest
