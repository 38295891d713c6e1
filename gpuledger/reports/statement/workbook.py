"""The statement's XLSX workbook as a finance analyst opens it: human headers with units (the
machine names stay in the CSV and Parquet), every column as wide as its widest formatted value (a
number too wide for its column prints ``###`` in Calc and Excel), frozen header rows, an
auto-filter over each table, totals under their own columns, a tie-out of each business unit to
the org total, and print setup (landscape A4, fit to one page wide, the header on every page).

Numbers stay numbers (money as Decimal with a currency format, GPU-hours with 3 decimals), no
formulas: what the file says is what gpuledger computed, readable without recalculation. The
bytes are a function of the statement alone (zip entry times and document dates from the data).
"""

from __future__ import annotations

import io
import re
import zipfile
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal
from pathlib import Path

import polars as pl

from gpuledger.reports.statement.build import ORG_LINES, UNASSIGNED, Statement
from gpuledger.rules.billing import billed as is_billed

HOUR_COLS = ("gpu_hours", "gpu_hours_active", "gpu_hours_unknown", "energy_kwh", "energy_kwh_facility", "kg_co2e",
             "gpu_hours_co2_unknown")  # three decimals
SHEET_COLUMNS = ["line_kind", "project", "gpu_model", "tier", "currency", "gpu_hours", "gpu_hours_active",
                 "gpu_hours_unknown", "efficiency_ratio", "energy_kwh_facility", "kg_co2e", "amount", "revision",
                 "correction_of", "note"]
# machine name -> the header a person reads, with its unit
HEADERS = {
    "business_unit": "Business unit", "line_kind": "Line", "project": "Project", "gpu_model": "GPU model",
    "tier": "Tier", "currency": "Currency", "gpu_hours": "Allocated (GPU-h)", "gpu_hours_active": "Active (GPU-h)",
    "gpu_hours_unknown": "Activity unknown (GPU-h)", "efficiency_ratio": "Efficiency (%)",
    "energy_kwh": "GPU energy (kWh)", "energy_kwh_facility": "Facility energy (kWh)", "kg_co2e": "Emissions (kgCO2e)",
    "gpu_hours_co2_unknown": "Emissions unknown (GPU-h)",
    "amount": "Amount", "idle_amount_included": "Idle included", "revision": "Revision",
    "correction_of": "Corrects", "note": "Note", "partition": "Slurm partition", "host": "Host",
    "sheet": "Sheet", "status": "Status",
    "jobs": "Jobs submitted", "still_waiting": "Still waiting", "wait_p50_s": "Wait p50 (s)", "wait_p90_s": "Wait p90 (s)",
}
MONEY_COLS = ("amount", "idle_amount_included")
NOTE_WIDTH = 60  # characters: longer notes wrap inside the column
MIN_WIDTH = 8
TITLE_SIZE = 14
FONT = "Calibri"  # openpyxl's default body font: a bold cell without a name would fall back to a serif


def header(name: str, currency: str | None = None) -> str:
    """The human header of column ``name``; money columns name their currency when one applies."""
    text = HEADERS.get(name, name.replace("_", " ").capitalize())
    if name in MONEY_COLS:
        text += f" ({currency})" if currency else " (in Currency)"
    return text


def money_format(currency: str | None) -> str:
    return f'#,##0.00 "{currency}"' if currency else "#,##0.00"


def shown(value, number_format: str) -> str:
    """``value`` as the number format prints it (what its column must be wide enough for)."""
    if value is None:
        return ""
    if isinstance(value, bool):
        return "TRUE" if value else "FALSE"
    if isinstance(value, Decimal | int | float) and number_format != "General":
        number = float(value) if not isinstance(value, Decimal) else value
        if number_format.endswith("%"):
            decimals = len(number_format.split(".")[1]) - 1 if "." in number_format else 0
            return f"{float(number) * 100:,.{decimals}f}%"
        m = re.match(r'#,##0(?:\.(0+))?(?: "([^"]+)")?$', number_format)
        if m:
            decimals = len(m[1] or "")
            text = f"{number:,.{decimals}f}"
            return f"{text} {m[2]}" if m[2] else text
    return str(value)


@dataclass
class Cell:
    value: object
    number_format: str = "General"
    bold: bool = False


def _line_cell(name: str, value, currency: str | None) -> Cell:
    if isinstance(value, datetime):
        return Cell(value.strftime("%Y-%m-%d %H:%M"))
    if isinstance(value, Decimal):
        return Cell(value, money_format(currency))
    if name in HOUR_COLS:
        return Cell(value, "#,##0.000")
    if name == "efficiency_ratio":
        return Cell(value, "0.0%")
    return Cell(value)


class SheetWriter:
    """Writes rows of :class:`Cell` onto one worksheet and remembers, per column, the widest text
    it printed; :meth:`finish` sets the widths, the frozen rows and the print setup."""

    def __init__(self, ws) -> None:
        self.ws = ws
        self.row = 1
        self.widths: dict[int, int] = {}

    def put(self, row: int, col: int, cell: Cell, *, measure: bool = True, wrap: bool = False):
        from openpyxl.styles import Alignment, Font  # lazy: optional extra gpuledger[reports]

        c = self.ws.cell(row=row, column=col, value=cell.value)
        if cell.number_format != "General":
            c.number_format = cell.number_format
        if cell.bold:
            c.font = Font(name=FONT, bold=True)
        text = shown(cell.value, cell.number_format)
        if wrap and len(text) > NOTE_WIDTH:
            # Calc and Excel do not grow a row for wrapped text written by another program: give the
            # row the height of its lines (15 points each at 11 pt)
            c.alignment = Alignment(wrap_text=True, vertical="top")
            lines = -(-len(text) // (NOTE_WIDTH - 4))
            dim = self.ws.row_dimensions[row]
            dim.height = max(dim.height or 15, 15 * lines)
        if measure:
            size = int(len(text) * 1.1) + 1 if cell.bold else len(text)  # bold text is wider
            self.widths[col] = max(self.widths.get(col, 0), min(size, NOTE_WIDTH))
        return c

    def title(self, text: str) -> None:
        from openpyxl.styles import Font  # lazy: optional extra gpuledger[reports]

        self.ws.cell(row=self.row, column=1, value=text).font = Font(name=FONT, bold=True, size=TITLE_SIZE)
        self.row += 2

    def pairs(self, rows: list[tuple[str, str]]) -> None:
        """Label / value rows (the values are text that may run on into the empty cells beside)."""
        for label, value in rows:
            self.put(self.row, 1, Cell(label, bold=True))
            self.put(self.row, 2, Cell(value), measure=False)
            self.row += 1
        self.row += 1

    def table(self, columns: list[str], rows: list[list[Cell]], *, totals: list[list[Cell]] = (),
              filter_: bool = True, freeze: bool = False) -> tuple[int, int]:
        """A header row, its rows and total rows below (each total in its column); an auto-filter
        over the header and rows. Returns (header row, last row)."""
        from openpyxl.styles import Alignment, Font, PatternFill  # lazy: optional extra gpuledger[reports]
        from openpyxl.utils import get_column_letter  # lazy: optional extra gpuledger[reports]

        head = self.row
        fill = PatternFill("solid", fgColor="F2F2F2")
        # a number column's header sits over its right-aligned numbers; a text column keeps a space
        # from the number before it (Calc and Excel print "0.00 USDyes" otherwise)
        numeric = {j for j in range(1, len(columns) + 1)
                   if any(_is_number(row[j - 1].value) for row in rows if j <= len(row) and row[j - 1] is not None)}
        for j, name in enumerate(columns, start=1):
            c = self.put(head, j, Cell(name, bold=True))
            c.fill = fill
            if j in numeric:
                c.alignment = Alignment(horizontal="right")
            elif j > 1:
                c.alignment = Alignment(horizontal="left", indent=1)
        r = head + 1
        for row in rows:
            for j, cell in enumerate(row, start=1):
                c = self.put(r, j, cell, wrap=columns[j - 1].startswith("Note"))
                if j > 1 and j not in numeric and not c.alignment.wrap_text:
                    c.alignment = Alignment(horizontal="left", indent=1)
            r += 1
        if filter_ and columns:
            self.ws.auto_filter.ref = f"A{head}:{get_column_letter(len(columns))}{max(r - 1, head)}"
        if freeze:
            self.ws.freeze_panes = f"A{head + 1}"
            self.ws.print_title_rows = f"{head}:{head}"
        for row in totals:
            for j, cell in enumerate(row, start=1):
                if cell.value is not None:
                    c = self.put(r, j, Cell(cell.value, cell.number_format, bold=True))
                    c.font = Font(name=FONT, bold=True)
            r += 1
        self.row = r + 1
        return head, r - 1

    def finish(self) -> None:
        from openpyxl.utils import get_column_letter  # lazy: optional extra gpuledger[reports]
        # lazy: optional extra gpuledger[reports]
        from openpyxl.worksheet.properties import PageSetupProperties

        for col, width in self.widths.items():
            # +2: the cell's padding and a digit's slack between fonts (Calibri here, Carlito there)
            self.ws.column_dimensions[get_column_letter(col)].width = max(MIN_WIDTH, width + 2)
        ps = self.ws.page_setup
        ps.orientation, ps.paperSize = "landscape", self.ws.PAPERSIZE_A4
        ps.fitToWidth, ps.fitToHeight = 1, 0  # one page wide, as many pages long as it takes
        self.ws.sheet_properties.pageSetUpPr = PageSetupProperties(fitToPage=True)
        self.ws.print_options.horizontalCentered = False
        self.ws.oddFooter.left.text = "&A"
        self.ws.oddFooter.right.text = "page &P of &N"


def _is_number(value) -> bool:
    return isinstance(value, int | float | Decimal) and not isinstance(value, bool)


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


def section_title(unit: str) -> str:
    return {ORG_LINES: "Idle and memo", UNASSIGNED: "Projects outside the tree"}.get(unit, unit)


def one_currency(frame: pl.DataFrame) -> str | None:
    if "currency" not in frame.columns:
        return None
    found = set(frame["currency"].drop_nulls().to_list())
    return found.pop() if len(found) == 1 else None


def _lines_table(w: SheetWriter, frame: pl.DataFrame) -> None:
    """Lines with a total per currency under their columns (billed lines only: memo lines and
    their corrections are outside what is owed)."""
    cols = frame.columns
    currency = one_currency(frame)
    rows = []
    for row in frame.iter_rows(named=True):
        rows.append([_line_cell(c, row[c], row.get("currency")) for c in cols])
    totals = []
    if "amount" in cols:
        billed = frame.filter(is_billed(frame)) if "line_kind" in cols else frame
        sums = billed.group_by("currency").agg(pl.col("amount").sum(), pl.col("gpu_hours").sum()).sort("currency")
        for cur, amount, hours in sums.iter_rows():
            total = [Cell(None) for _ in cols]
            total[0] = Cell("Total" + (" (billed lines)" if frame.height != billed.height else ""))
            total[cols.index("currency")] = Cell(cur)
            total[cols.index("gpu_hours")] = Cell(round(hours or 0.0, 6), "#,##0.000")
            total[cols.index("amount")] = Cell(Decimal(amount), money_format(cur))
            totals.append(total)
    w.table([header(c, currency) for c in cols], rows, totals=totals, freeze=True)


def _summary(w: SheetWriter, st: Statement, sheet_of: dict[str, str]) -> None:
    w.title(f"GPU statement {st.period} — {st.scope}")
    w.pairs([("Status", st.status_sentence), ("Period", (f"{st.period_start:%Y-%m-%d} to {st.period_end:%Y-%m-%d} "
                                                         "(UTC, end exclusive)")),
             ("Data through", f"{st.billed_through:%Y-%m-%d %H:%M} UTC"),
             ("Config version", "none" if st.config_version is None else str(st.config_version)),
             *_history_pairs(st)])
    totals = unit_totals(st)
    cols = ["Business unit", "Sheet", "Currency", header("gpu_hours"), header("gpu_hours_active"),
            header("gpu_hours_unknown"), header("amount", one_currency(totals))]
    rows = [[Cell("idle capacity and memo lines" if u == ORG_LINES else u), Cell(sheet_of.get(u, "")), Cell(c),
             Cell(h, "#,##0.000"), Cell(None if u == ORG_LINES else a, "#,##0.000"),
             Cell(None if u == ORG_LINES else k, "#,##0.000"), Cell(Decimal(m), money_format(c))]
            for u, c, h, a, k, m in totals.iter_rows()]
    owed = st.totals()
    tie = []
    for cur, amount in owed.items():
        units = totals.filter(pl.col("currency") == cur)
        tie.append([Cell("Total owed (Σ business units)"), None, Cell(cur),
                    Cell(round(units["gpu_hours"].sum(), 6), "#,##0.000"), None, None,
                    Cell(amount, money_format(cur))])
        rec = next((r for r in st.reconciliation if r.currency == cur), None)
        if rec is not None and rec.capacity_amount is not None:
            tie.append([Cell("Capacity × price + over-allocated"), None, Cell(cur),
                        Cell(rec.capacity_gpu_hours, "#,##0.000"), None, None,
                        Cell(rec.capacity_amount + rec.over_allocated, money_format(cur))])
            tie.append([Cell("Difference (0.00: ties out)"), None, Cell(cur), None, None, None,
                        Cell(rec.difference, money_format(cur))])
    w.table(cols, rows, totals=[[c if c is not None else Cell(None) for c in t] for t in tie])
    if st.reconciliation:
        rcols = ["Currency", "Charges", "Idle", "Corrections", "Total", "Capacity (GPU-h)", "Capacity × price",
                 "Over-allocated", "Difference", "Reconciles"]
        rrows = []
        for r in st.reconciliation:
            fmt = money_format(r.currency)
            rrows.append([Cell(r.currency), Cell(r.charges, fmt), Cell(r.idle, fmt), Cell(r.corrections, fmt),
                          Cell(r.total, fmt), Cell(r.capacity_gpu_hours, "#,##0.000"), Cell(r.capacity_amount, fmt),
                          Cell(r.over_allocated, fmt), Cell(r.difference, fmt),
                          Cell("yes, to the cent" if r.reconciles else "NO")])
        w.put(w.row, 1, Cell("Reconciliation per currency", bold=True), measure=False)
        w.row += 1
        w.table(rcols, rrows, filter_=False)
    if st.pools:
        pcols = ["Currency", "GPU model", "Tier", "Billed", "Capacity (GPU-h)", "Capacity × price", "Over-allocated",
                 "Difference", "Reconciles"]
        unknown = any(p.capacity_unknown for p in st.pools)
        if unknown:
            pcols.insert(7, "Capacity unknown")

        def verdict(p) -> str:
            if not p.difference:
                return "yes, to the cent"
            if p.over_allocated:
                return "memo rounded on its own"
            return "issued before pool-first rounding" if p.issued else "NO"

        prows = [[Cell(p.currency), Cell(p.gpu_model), Cell(p.tier), Cell(p.billed, money_format(p.currency)),
                  Cell(p.capacity_gpu_hours, "#,##0.000"), Cell(p.capacity_amount, money_format(p.currency)),
                  Cell(p.over_allocated, money_format(p.currency)),
                  *([Cell(p.capacity_unknown, money_format(p.currency))] if unknown else []),
                  Cell(p.difference, money_format(p.currency)), Cell(verdict(p))]
                 for p in st.pools]
        w.put(w.row, 1, Cell("Reconciliation per GPU pool (each pool's lines add up to its capacity × price)",
                             bold=True), measure=False)
        w.row += 1
        w.table(pcols, prows, filter_=False)
    if st.parent is not None:  # a business unit's workbook: its share of the org and its projects
        w.pairs([("Business unit", x) for x in st.unit_sentences()])
        subtotals = st.project_subtotals()
        w.table(["Project", "Currency", header("gpu_hours"), header("amount", one_currency(subtotals))],
                [[Cell(p), Cell(c), Cell(h, "#,##0.000"), Cell(Decimal(a), money_format(c))]
                 for p, c, h, a in subtotals.iter_rows()], filter_=False)
    texts = [("Note", n) for n in st.notes if n != st.status_sentence] + [("Warning", x) for x in st.warnings]
    if texts:
        w.pairs(texts)


def _history_pairs(st: Statement) -> list[tuple[str, str]]:
    """("Closed" / "Correction", who, when and why) of a closed month's revisions."""
    return [("Closed" if r.revision == 0 else f"Correction {r.revision}", r.sentence) for r in st.state.revisions]


def _sheet_head(w: SheetWriter, st: Statement, what: str) -> None:
    """What a printed or forwarded sheet is, above its table: the statement, the state, the period,
    the close and corrections."""
    w.title(f"{what} — GPU statement {st.period} — {st.scope}")
    w.pairs([("Status", st.status), ("Period", f"{st.period_start:%Y-%m-%d} to {st.period_end:%Y-%m-%d} (UTC, end "
                                               "exclusive)"), *_history_pairs(st)])


#: the state's look, as in the HTML: final green / blue, a draft grey, provisional orange
STATE_FILL = {"closed": "E3F1DF", "corrected": "E3EBF7", "open": "EEEEEE", "provisional": "FDE9C8",
              "closed-provisional": "FDE9C8", "corrected-provisional": "FDE9C8"}


def _mark_state(ws, st: Statement) -> None:
    """The Status value of a sheet's head in its state's colour, bold (not plain text)."""
    from openpyxl.styles import Font, PatternFill  # lazy: optional extra gpuledger[reports]

    for row in ws.iter_rows(min_col=1, max_col=2, max_row=12):
        if row[0].value == "Status":
            row[1].fill = PatternFill("solid", fgColor=STATE_FILL.get(st.state.token, "EEEEEE"))
            row[1].font = Font(name=FONT, bold=True)
            return


def _page_head(ws, st: Statement) -> None:
    """Every printed page: the statement on the left, its state on the right (the footer has the
    sheet and page x of y). '&' is the header's control character: doubled."""
    ws.oddHeader.left.text = f"GPU statement {st.period} — {st.scope}".replace("&", "&&")
    ws.oddHeader.right.text = st.status.upper().replace("&", "&&") if st.state.mark else st.status.replace("&", "&&")


def write_xlsx(st: Statement, path: Path) -> Path:
    """A Summary sheet (status, totals per business unit tied out to the org total, the
    reconciliation), one sheet per business unit with its lines and total, the org's idle and memo
    lines on their own sheet, GPU-hours by partition and by host."""
    from openpyxl import Workbook  # lazy: optional extra gpuledger[reports]
    from openpyxl.writer.excel import ExcelWriter  # lazy: optional extra gpuledger[reports]

    wb = Workbook()
    stamp = st.billed_through.replace(microsecond=0)
    wb.properties.creator = "gpuledger"
    wb.properties.title = f"gpuledger statement {st.period} {st.scope}"
    wb.properties.created = wb.properties.modified = stamp
    used: set[str] = set()
    summary = wb.active
    summary.title = _sheet_name("Summary", used)
    sheet_of = {unit: _sheet_name(section_title(unit), used) for unit in st.sections}
    writers = [SheetWriter(summary)]
    _summary(writers[0], st, sheet_of)
    for unit in st.sections:
        w = SheetWriter(wb.create_sheet(sheet_of[unit]))
        _sheet_head(w, st, section_title(unit))
        _lines_table(w, st.unit_lines(unit).select(SHEET_COLUMNS))
        writers.append(w)
    for extra, title in ((st.by_partition, "By partition"), (st.by_host, "By host"), (st.waits, "Wait times")):
        if extra.height:
            w = SheetWriter(wb.create_sheet(_sheet_name(title, used)))
            _sheet_head(w, st, title)
            _lines_table(w, extra)
            writers.append(w)
    for w in writers:
        w.finish()
        _page_head(w.ws, st)
        _mark_state(w.ws, st)
    buffer = io.BytesIO()
    archive = _FixedTimeZip(buffer, "w", zipfile.ZIP_DEFLATED, allowZip64=True)
    archive.fixed_time = (stamp.year, stamp.month, stamp.day, stamp.hour, stamp.minute, stamp.second - stamp.second % 2)
    ExcelWriter(wb, archive).save()  # not save_workbook: it stamps `modified` with the wall clock
    path.write_bytes(buffer.getvalue())
    return path


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
