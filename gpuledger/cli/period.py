"""`gpuledger period close / list / correct / audit`: closed months and their corrections.

Light at import (typer, rich): DuckDB, polars and pydantic load when a command runs.
"""

from __future__ import annotations

from pathlib import Path

import typer
from rich.console import Console

from gpuledger.cli.options import Format, FormatOpt, OutOpt, WarehouseOpt, warehouse_path
from gpuledger.cli.views.show import print_rows

app = typer.Typer(help="Close a month's chargeback statement, list closed months, correct one.",
                  no_args_is_help=True)
console = Console()
err = Console(stderr=True)
ByOpt = typer.Option(None, "--by", help="who acts, for the audit trail (default: the OS user)")


@app.command("close")
def period_close(
    period: str = typer.Argument(..., help="the month, YYYY-MM (UTC)"),
    provisional: bool = typer.Option(False, "--provisional",
                                     help="close even though the data ends before the month does"),
    by: str | None = ByOpt, warehouse_file: WarehouseOpt = None,
) -> None:
    """Freeze a month's chargeback statement (every level, with a checksum, who and when). Reports
    of the month then read these lines; only `period correct` changes what it says."""
    from gpuledger import warehouse
    from gpuledger.reports.statement.closing import close

    with warehouse.open_writer(warehouse_path(warehouse_file)) as con:
        done = close(con, period, by=by, allow_provisional=provisional)
    totals = ", ".join(f"{c} {a}" for c, a in done["totals"].items()) or "no charges"
    how = f"closed, provisional ({done['provisional']})" if done["provisional"] else "closed"
    console.print(f"period {period} {how}: {done['lines']} lines (config version {done['config_version']}), "
                  f"total {totals}, sha256 {done['sha256'][:16]}")


@app.command("correct")
def period_correct(
    period: str = typer.Argument(..., help="a closed month, YYYY-MM"),
    reason: str = typer.Option(..., "--reason", help="why it is re-issued (kept in the audit trail)"),
    by: str | None = ByOpt, warehouse_file: WarehouseOpt = None,
) -> None:
    """Re-issue a closed month with today's config and data: the differences from what was issued
    become credit / debit lines of a new revision, with who, when and why."""
    from gpuledger import warehouse
    from gpuledger.reports.statement.closing import correct

    with warehouse.open_writer(warehouse_path(warehouse_file)) as con:
        done = correct(con, period, reason=reason, by=by)
    if done is None:
        console.print(f"period {period}: the recomputed statement equals the issued one; nothing to correct")
        return
    net = ", ".join(f"{c} {a}" for c, a in done["net"].items()) or "0"
    console.print(f"period {period} revision {done['revision']}: {done['credit_lines']} credit and "
                  f"{done['debit_lines']} debit project lines, net {net} (config version {done['config_version']})")
    if done.get("rounded_fallback"):
        from gpuledger.ledger.periods import ROUNDED_FALLBACK_NOTE

        console.print(ROUNDED_FALLBACK_NOTE.format(period=period), style="yellow")


@app.command("list")
def period_list(fmt: Format = FormatOpt, out: Path | None = OutOpt, warehouse_file: WarehouseOpt = None) -> None:
    """Closed months: revisions, when and by whom closed and last corrected, total as of now."""
    from gpuledger import warehouse
    from gpuledger.ledger.periods import period_list as listing

    with warehouse.open_reader(warehouse_path(warehouse_file)) as con:
        frame = listing(con)
    print_rows("closed periods", ["period", "state", "revisions", "closed at (UTC)", "closed by", "last issued", "last by",
                              "last reason", "config", "total"],
           frame.select("period", "state", "revisions", "closed_at", "closed_by", "last_issued_at", "last_issued_by",
                        "last_reason", "config_version", "total").iter_rows(), fmt, out)


@app.command("audit")
def period_audit(fmt: Format = FormatOpt, out: Path | None = OutOpt, warehouse_file: WarehouseOpt = None) -> None:
    """The ledger's audit trail: config loads, closes and corrections (who, when, why)."""
    from gpuledger import warehouse
    from gpuledger.ledger.audit import audit_rows

    with warehouse.open_reader(warehouse_path(warehouse_file)) as con:
        rows = audit_rows(con)
    print_rows("ledger audit", ["at (UTC)", "who", "action", "subject", "reason", "detail"], rows, fmt, out)
