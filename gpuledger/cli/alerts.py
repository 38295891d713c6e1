"""`gpuledger alerts run | deliver | outbox`: plan alerts from the warehouse into the outbox and
deliver them (apprise, loaded lazily); channel URLs come from the environment or the secrets file."""

from __future__ import annotations

from pathlib import Path

import typer
from rich.console import Console

from gpuledger import tables
from gpuledger.cli.options import (
    ConfigOpt,
    Format,
    FormatOpt,
    OutOpt,
    WarehouseOpt,
    show_frame,
    utc_option,
    warehouse_config,
    warehouse_path,
)

app = typer.Typer(help="On-call and owner alerts through the warehouse outbox.", no_args_is_help=True)
console = Console()


def _policy(warehouse_file, config):
    from gpuledger import warehouse

    with warehouse.open_reader(warehouse_path(warehouse_file)) as con:
        return warehouse_config(con, config, write=False)


@app.command("run")
def run(
    now: str | None = typer.Option(None, "--now", help="evaluate as of this UTC time (default: the newest data)"),
    warehouse_file: WarehouseOpt = None, config: ConfigOpt = None,
) -> None:
    """One cycle: squatting alerts, the daily digest and budget alerts into the outbox, then send
    what is due (retries included)."""
    from gpuledger.alerts.cycle import run_alert_cycle
    from gpuledger.extras import require

    require("apprise")
    cfg = _policy(warehouse_file, config)
    report = run_alert_cycle(warehouse_path(warehouse_file), cfg.policy, now=utc_option(now, "--now"),
                             currency=cfg.currency)
    d = report.delivery
    console.print(f"{report.planned} alerts planned, {report.new} new; sent {d.sent}, retrying {d.retried}, "
                  f"failed {d.failed}")
    for error in d.errors:
        typer.echo(f"warning: {error}", err=True)


@app.command("deliver")
def deliver_due(warehouse_file: WarehouseOpt = None, config: ConfigOpt = None) -> None:
    """Send what is due in the outbox (nothing new is planned)."""
    from gpuledger.alerts.channels import notifier_for
    from gpuledger.alerts.outbox import deliver
    from gpuledger.extras import require

    require("apprise")
    policy = _policy(warehouse_file, config).policy
    d = deliver(warehouse_path(warehouse_file), notifier_for, max_attempts=policy.alerts.max_attempts,
                retry_base_seconds=policy.alerts.retry_base_seconds)
    console.print(f"sent {d.sent}, retrying {d.retried}, failed {d.failed}")


@app.command("outbox")
def outbox(
    status: str | None = typer.Option(None, help="pending, sent or failed"),
    limit: int = typer.Option(50, min=1, max=1_000_000), fmt: Format = FormatOpt, out: Path | None = OutOpt,
    wide: bool = tables.WideOpt, columns: str | None = tables.ColumnsOpt,
    warehouse_file: WarehouseOpt = None,
) -> None:
    """The outbox, newest first: what was sent, what waits, what failed and why."""
    if status is not None and status not in ("pending", "sent", "failed"):  # not an empty table
        raise typer.BadParameter(f"{status!r}: use pending, sent or failed", param_hint="--status")
    from gpuledger import warehouse
    from gpuledger.alerts.outbox import outbox_rows

    with warehouse.open_reader(warehouse_path(warehouse_file)) as con:
        frame = outbox_rows(con, status=status, limit=limit)
    show_frame(frame, fmt, out, "alert outbox (newest first)", OUTBOX, wide, columns)


C = tables.Column
OUTBOX = tables.View(columns=(
    C("created_at", "raised\n(UTC)", "datetime"), C("kind", "kind", key=True), C("severity", "severity"),
    C("channel", "channel", key=True), C("recipient", "recipient", default=False), C("status", "status"),
    C("attempts", "tries", "int"), C("sent_at", "sent\n(UTC)", "datetime", default=False),
    C("subject", "subject", wrap=True), C("last_error", "last error", wrap=True, default=False),
    C("idempotency_key", "key", default=False),
))
