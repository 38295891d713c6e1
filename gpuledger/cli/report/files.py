"""`gpuledger report statement` and `gpuledger report weekly`: finance statement files in a folder.
Light at import: polars, DuckDB, openpyxl and jinja2 load when a command runs."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from gpuledger import warehouse
from gpuledger.cli.options import (
    ConfigOpt,
    LazyConsole,
    WarehouseOpt,
    utc_option,
    warehouse_config,
    warehouse_path,
)

console = LazyConsole()


def _out_dir(path: Path) -> Path:
    if path.exists() and not path.is_dir():
        raise typer.BadParameter(f"{path} exists and is not a directory; give a folder", param_hint="--out")
    try:  # made here, before any work, so a folder that cannot be made is a usage error
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise typer.BadParameter(f"cannot create {path} ({exc.strerror or exc}); choose another folder",
                                 param_hint="--out") from None
    return path


def statement(
    period: Annotated[str, typer.Option("--period", "-p", help="the month, YYYY-MM")],
    out: Annotated[Path, typer.Option("--out", "-o", help="folder to write the statement files into")],
    node: str | None = typer.Option(None, "--node", help="one business unit / org tree node only"),
    email: bool = typer.Option(False, "--email", help="also e-mail the files to policy.reports.finance_channel"),
    now: str | None = typer.Option(None, "--now", help="the data's 'now' for an open month (default: newest data)"),
    pdf: bool | None = typer.Option(None, "--pdf/--no-pdf",
                                    help="print the HTML to PDF with headless Chromium (default: when Chromium "
                                         "is installed)"),
    showback: str | None = typer.Option(None, "--showback",
                                        help="also a showback CSV re-weighting each pool by 'active' GPU-hours or "
                                             "'energy' (kWh); idle redistributed, time-sliced and unmeasured hours "
                                             "kept at their allocated share; the statement stays the ledger of "
                                             "record"),
    fmt: str = typer.Option("all", "--format", "-f",
                            help="'all' (CSV, Parquet, XLSX, HTML, FOCUS, PDF) or 'focus': only the FinOps FOCUS "
                                 "1.2 CSV (one row per line, Σ BilledCost = the statement's total)"),
    allow_empty: bool = typer.Option(False, "--allow-empty",
                                     help="write the statement of a month with no data (it says \"no data\")"),
    warehouse_file: WarehouseOpt = None, config: ConfigOpt = None,
) -> None:
    """Finance statement for a month: CSV, Parquet, XLSX (summary + a sheet per business unit),
    a self-contained HTML page with charts, its PDF (A4, headless Chromium), and manifest.json (SHA-256 of every file, period,
    config version, closed / provisional). A closed month reads its frozen lines."""
    from gpuledger.extras import require
    from gpuledger.rules.periods import month_bounds

    require("openpyxl"), require("jinja2")
    from gpuledger.reports.statement.build import build_statement
    from gpuledger.reports.statement.files import write_statement_set

    month_bounds(period)  # a usage error naming the form for anything but YYYY-MM
    if fmt not in ("all", "focus"):
        raise typer.BadParameter(f"{fmt!r}: choose all or focus", param_hint="--format")
    _check_showback(showback)
    _out_dir(out)
    with warehouse.open_reader(warehouse_path(warehouse_file)) as con:
        cfg = warehouse_config(con, config, write=False)
        st = build_statement(con, period, node=node, policy=cfg.policy, now=utc_option(now, "--now"))
    if st.empty and not allow_empty:
        from gpuledger.errors import RunError

        raise RunError(f"statement {period}: no data (no GPU sample and no job allocated in the month), nothing written; "
                       "ingest the month, or pass --allow-empty to write a statement that says \"no data\"")
    focus = fmt == "focus"
    manifest = write_statement_set(st, out, per_unit=node is None, pdf=not focus and _want_pdf(pdf),
                                   showback=showback, focus_only=focus)
    _say_written(st, manifest, period, out, showback)
    if email:
        from gpuledger.reports.statement.delivery import email_statement

        sent = email_statement(cfg.policy, manifest, out)
        console.print(f"e-mailed to finance channel {sent}")


def _check_showback(showback: str | None) -> None:
    """--showback names a basis, refused before any work otherwise."""
    if showback is not None:
        from gpuledger.reports.showback import BASES

        if showback not in BASES:
            raise typer.BadParameter(f"{showback!r}: choose {', '.join(BASES)}", param_hint="--showback")


def _want_pdf(pdf: bool | None) -> bool:
    """--pdf / --no-pdf, else a PDF when Chromium is installed (a warning saying how when not)."""
    if pdf is not None:
        return pdf
    from gpuledger.reports.statement.pdf import chromium

    if chromium() is not None:
        return True
    typer.echo("warning: no Chromium found, so no PDF statement (apt-get install chromium, or "
               "$GPULEDGER_CHROMIUM); --no-pdf silences this", err=True)
    return False


def _say_written(st, manifest: dict, period: str, out: Path, showback: str | None) -> None:
    """What was written, the month's state, its reconciliation per pool and the warnings."""
    console.print(f"statement {period} of {st.scope}: {st.status}; {len(manifest['files'])} files in {out}")
    console.print(st.status_sentence)
    if st.empty:
        console.print(f"no data: the statement of {period} has no line")
    for r in st.reconciliation:
        console.print(r.sentence())
    for line in manifest.get("showback", {}).get("per_pool", []):
        console.print(f"showback ({showback}): {line}")
    for w in st.warnings:
        typer.echo(f"warning: {w}", err=True)


def weekly(
    week: Annotated[str, typer.Option("--week", help="ISO week, YYYY-Www")],
    out: Annotated[Path, typer.Option("--out", "-o", help="folder to write the summary into")],
    now: str | None = typer.Option(None, "--now", help="the data's 'now' (default: newest data)"),
    warehouse_file: WarehouseOpt = None, config: ConfigOpt = None,
) -> None:
    """Weekly summary per business unit: GPU-hours, spend, budget burn, top squatters."""
    from gpuledger.extras import require

    require("jinja2")
    from gpuledger.reports.weekly import build_weekly, write_weekly

    _out_dir(out)
    with warehouse.open_reader(warehouse_path(warehouse_file)) as con:
        cfg = warehouse_config(con, config, write=False)
        summary = build_weekly(con, week, policy=cfg.policy, now=utc_option(now, "--now"))
    manifest = write_weekly(summary, out)
    console.print(f"weekly summary {week}: {len(manifest['files'])} files in {out}")
    for note in summary.notes:
        console.print(note)
