"""Analytics commands: `gpuledger report ...`, `fairshare`, `budget`, `squatters`.

Tables print to the terminal; `--format csv|parquet|json --out FILE` writes them for other tools.
Times are UTC; "now" defaults to the newest data in the warehouse (see reports.data_now).
"""

from __future__ import annotations

from datetime import datetime, timedelta
from decimal import Decimal
from enum import Enum
from pathlib import Path
from typing import TYPE_CHECKING

import typer
from rich.console import Console
from rich.table import Table

from gpuledger import warehouse
from gpuledger.cli_common import ConfigOpt, WarehouseOpt, config_or_exit, warehouse_path
from gpuledger.lazy import lazy_import
from gpuledger.timeparse import parse_utc

reports = lazy_import("gpuledger.analytics.reports")  # polars + DuckDB: loaded when a command runs
if TYPE_CHECKING:
    import polars as pl

report_app = typer.Typer(help="Reports over a period: chargeback, usage, utilization.", no_args_is_help=True)
console = Console()
if not console.is_terminal:  # piped or captured: do not squeeze tables into 80 columns
    console = Console(width=220)


class Format(str, Enum):
    table = "table"
    csv = "csv"
    parquet = "parquet"
    json = "json"


FormatOpt = typer.Option(Format.table, "--format", "-f", help="table (terminal), csv, parquet or json")
OutOpt = typer.Option(None, "--out", "-o", help="file to write (csv / parquet / json); default stdout for csv/json")
NowOpt = typer.Option(None, "--now", help="evaluate as of this UTC time (default: the newest data)")


def _time(text: str | None) -> datetime | None:
    if text is None:
        return None
    try:
        return parse_utc(text)
    except ValueError as exc:
        raise typer.BadParameter(str(exc)) from None


def _show(frame: pl.DataFrame, fmt: Format, out: Path | None, title: str,
          terminal_drop: tuple[str, ...] = ()) -> None:
    if fmt is Format.table:
        frame = frame.drop([c for c in terminal_drop if c in frame.columns])
        table = Table(title=title)
        for col in frame.columns:
            table.add_column(col, justify="right" if frame[col].dtype.is_numeric() else "left")
        for row in frame.iter_rows():
            table.add_row(*[_cell(v) for v in row])
        console.print(table)
        return
    if fmt is Format.parquet:
        if out is None:
            raise typer.BadParameter("parquet needs --out FILE")
        frame.write_parquet(out)
    elif fmt is Format.csv:
        text = frame.write_csv()
        out.write_text(text) if out else typer.echo(text, nl=False)
    else:
        text = frame.write_json()
        out.write_text(text) if out else typer.echo(text)
    if out:
        console.print(f"wrote {frame.height} rows to {out}", style="dim")


def _cell(value) -> str:
    if value is None:
        return ""
    if isinstance(value, float):
        return "inf" if value == float("inf") else f"{value:,.3f}"
    if isinstance(value, Decimal):
        return f"{value:,.2f}"
    if isinstance(value, datetime):
        return value.strftime("%Y-%m-%d %H:%M")
    return str(value)


def _open(warehouse_file: Path | None):
    return warehouse.open_reader(warehouse_path(warehouse_file))


@report_app.command("chargeback")
def chargeback(
    period: str = typer.Option(..., "--period", "-p", help="YYYY-MM, YYYY-MM-DD, YYYY-Www or START..END"),
    level: str = typer.Option("project", help="job, project or node (every org tree node)"),
    fmt: Format = FormatOpt, out: Path | None = OutOpt, now: str | None = NowOpt,
    warehouse_file: WarehouseOpt = None, config: ConfigOpt = None,
) -> None:
    """Chargeback lines: allocated GPU-hours × price (model, tier, as of each hour), exact to the
    cent, idle capacity on its own line or spread (config policy.chargeback.idle_cost)."""
    from gpuledger.analytics.chargeback import period_bounds

    cfg = config_or_exit(config)
    try:
        period_bounds(period)
    except ValueError as exc:
        raise typer.BadParameter(str(exc), param_hint="--period") from None
    with _open(warehouse_file) as con:
        lines = reports.chargeback_report(con, period, level=level, policy=cfg.policy, now=_time(now))
    _show(lines, fmt, out, f"chargeback {period} by {level} (UTC)",
          terminal_drop=("period_start", "period_end", "idle_amount_included"))


@report_app.command("usage")
def usage(
    start: str = typer.Option(..., help="UTC start (ISO-8601 or epoch s)"),
    end: str = typer.Option(..., help="UTC end, exclusive"),
    by: str = typer.Option("project", help="job, user, project or node"),
    fmt: Format = FormatOpt, out: Path | None = OutOpt, warehouse_file: WarehouseOpt = None,
) -> None:
    """Allocated, active, idle and unknown GPU-hours, efficiency and energy (kWh)."""
    with _open(warehouse_file) as con:
        frame = reports.usage_report(con, start=_time(start), end=_time(end), by=by)
    _show(frame, fmt, out, f"GPU usage by {by}")


@report_app.command("utilization")
def utilization(
    start: str | None = typer.Option(None, help="UTC start (default: 24 h before --end)"),
    end: str | None = typer.Option(None, help="UTC end, exclusive (default: the hour of the newest data)"),
    by: str = typer.Option("model", help="model, cluster, fleet (per hour) or kind (workload kinds)"),
    fmt: Format = FormatOpt, out: Path | None = OutOpt, warehouse_file: WarehouseOpt = None,
) -> None:
    """Allocation % and active % of GPU capacity by hour, MIG slices included."""
    with _open(warehouse_file) as con:
        # Default: the last 24 whole hours before the newest data.
        hi = _time(end) or reports.data_now(con).replace(minute=0, second=0, microsecond=0)
        lo = _time(start) or hi - timedelta(days=1)
        frame = reports.utilization_report(con, start=lo, end=hi, by=by)
    _show(frame, fmt, out, f"utilization by {by}, {lo} .. {hi} UTC")


def fairshare(
    fmt: Format = FormatOpt, out: Path | None = OutOpt, now: str | None = NowOpt,
    warehouse_file: WarehouseOpt = None, config: ConfigOpt = None,
) -> None:
    """Hierarchical fair share like `sshare -l`: shares, usage, level FS, rank and factor, plus the
    delivery ratio (delivered ÷ owed GPU-hours) and occupancy over the usage window."""
    cfg = config_or_exit(config)
    with _open(warehouse_file) as con:
        frame = reports.fairshare_report(con, policy=cfg.policy, as_of=_time(now))
    _show(frame, fmt, out, f"fair share ({cfg.policy.usage.mode} usage, GPU-hours)",
          terminal_drop=("order", "share_global", "usage_norm"))


def budget(
    fmt: Format = FormatOpt, out: Path | None = OutOpt, now: str | None = NowOpt,
    jobs: bool = typer.Option(False, "--jobs", help="per running job: funded or not, protected until"),
    warehouse_file: WarehouseOpt = None, config: ConfigOpt = None,
) -> None:
    """Budget burn per org node: consumed, remaining, 7-day burn rate, projected exhaustion, status
    (normalised GPU-hours)."""
    cfg = config_or_exit(config)
    with _open(warehouse_file) as con:
        if jobs:
            frame = reports.funding_report(con, policy=cfg.policy, now=_time(now))
        else:
            frame = reports.budget_report(con, as_of=_time(now))
    _show(frame, fmt, out, "job funding" if jobs else "budget burn")


def squatters(
    fmt: Format = FormatOpt, out: Path | None = OutOpt, now: str | None = NowOpt,
    include_exempt: bool = typer.Option(False, help="also list exempt jobs (marked)"),
    warehouse_file: WarehouseOpt = None, config: ConfigOpt = None,
) -> None:
    """Jobs sitting on idle GPUs right now: idle GPUs, idle since, wasted GPU-hours and cost,
    memory held, severity (warning / second-warning / preempt-eligible)."""
    cfg = config_or_exit(config)
    with _open(warehouse_file) as con:
        frame = reports.squatters_report(con, policy=cfg.policy, now=_time(now), include_exempt=include_exempt)
    _show(frame, fmt, out, "idle GPU findings (UTC)",
          terminal_drop=("cluster", "currency", "exempt", "exempt_reason", "namespace"))
