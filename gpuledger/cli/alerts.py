"""`gpuledger alerts run | deliver | outbox`: plan alerts from the warehouse into the outbox and
deliver them (apprise, loaded lazily); channel URLs come from the environment or the secrets file."""

from __future__ import annotations

from pathlib import Path

import typer
from rich.console import Console

from gpuledger.cli.options import (
    ConfigOpt,
    Format,
    FormatOpt,
    OutOpt,
    WarehouseOpt,
    utc_option,
    warehouse_config,
    warehouse_path,
)
from gpuledger.cli.views import tables
from gpuledger.cli.views.show import show_frame

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
    from gpuledger.alerts.outbox import deliver
    from gpuledger.channels import notifier_for
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


# --- an owner's answer to a squatting alert (issue 38) ----------------------------------------------
# Who answers: ``--as USER`` (default: the OS user running the command), checked against the job's
# owner as the scheduler recorded it. On a login node the OS account is the owner's own; the audit
# records both the named owner and the OS user.
OwnerOpt = typer.Option(None, "--as", help="the job's owner (default: the OS user running this)")
JobClusterOpt = typer.Option(None, "--cluster", help="the job's cluster (when its id exists on several)")
WhenOpt = typer.Option(None, "--now", help="as of this UTC time (default: the wall clock)")


def _answer(job: str, cluster: str | None, who: str | None, choice: str, hours: float | None, now: str | None,
            warehouse_file, config) -> None:
    import getpass

    from gpuledger import warehouse
    from gpuledger.alerts.self_service import describe, record
    from gpuledger.errors import UsageError
    from gpuledger.rules.clock import utc_now

    path = warehouse_path(warehouse_file)
    with warehouse.open_writer(path):  # the schema up to date
        pass
    with warehouse.open_reader(path) as con:
        cfg = warehouse_config(con, config, write=False)
        clusters = [r[0] for r in con.execute("SELECT DISTINCT cluster FROM jobs WHERE job_id = $j "
                                              "AND ($c IS NULL OR cluster = $c)", {"j": job, "c": cluster}).fetchall()]
    if not clusters:
        raise UsageError(f"job {job!r}{f' on {cluster}' if cluster else ''} is not in the warehouse; check the id "
                         "(as in the alert) and --cluster")
    if len(clusters) > 1:
        raise UsageError(f"job {job!r} exists on clusters {', '.join(sorted(clusters))}: pass --cluster")
    os_user = getpass.getuser()
    choice_of = {"cluster": clusters[0], "job_id": job, "user": who or os_user, "choice": choice, "hours": hours}
    outcome, why, _ = record(path, cfg, choice_of, identity=f"cli (OS user {os_user})",
                             now=utc_option(now, "--now") or utc_now())
    if outcome != "granted":
        raise UsageError(f"{describe(choice_of)}: refused: {why}")
    typer.echo(f"{describe(choice_of)}: {why} (audited)")


@app.command("keep")
def keep(job: str = typer.Argument(..., help="the job's id, as in the alert"),
         hours: float = typer.Option(..., "--hours", help="how long to keep it (policy.alerts.self_service: 1-4 h)"),
         cluster: str | None = JobClusterOpt, who: str | None = OwnerOpt, now: str | None = WhenOpt,
         warehouse_file: WarehouseOpt = None, config: ConfigOpt = None) -> None:
    """Keep your idle job for a while: no squatting warning or preemption until then, within your
    team's weekly allowance of kept hours."""
    _answer(job, cluster, who, "keep", hours, now, warehouse_file, config)


@app.command("release")
def release(job: str = typer.Argument(..., help="the job's id, as in the alert"), cluster: str | None = JobClusterOpt,
            who: str | None = OwnerOpt, now: str | None = WhenOpt,
            warehouse_file: WarehouseOpt = None, config: ConfigOpt = None) -> None:
    """Release your idle job now: the next enforcement cycle stops it (through plan -> apply)."""
    _answer(job, cluster, who, "release", None, now, warehouse_file, config)


@app.command("exemption")
def exemption(job: str = typer.Argument(..., help="the job's id, as in the alert"),
              cluster: str | None = JobClusterOpt, who: str | None = OwnerOpt, now: str | None = WhenOpt,
              warehouse_file: WarehouseOpt = None, config: ConfigOpt = None) -> None:
    """Ask on-call for an exemption for your job (an alert to policy.alerts.on_call)."""
    _answer(job, cluster, who, "exemption", None, now, warehouse_file, config)


links_app = typer.Typer(help="The endpoint of the owners' signed self-service links.", no_args_is_help=True)
app.add_typer(links_app, name="links")


@links_app.command("serve")
def serve_links(port: int = typer.Option(8765, "--port", min=1, max=65535),
                host: str = typer.Option("127.0.0.1", "--address", help="the address to listen on"),
                warehouse_file: WarehouseOpt = None, config: ConfigOpt = None) -> None:
    """Answer the signed links of owners' squatting mails (policy.alerts.self_service.url should
    reach this); the secret from $GPULEDGER_LINK_SECRET or link_secret in the secrets file."""
    from gpuledger import warehouse
    from gpuledger.alerts import links
    from gpuledger.alerts.self_service import make_server
    from gpuledger.errors import UsageError

    key = links.secret()
    if key is None:
        raise UsageError(f"no link secret: set ${links.SECRET_ENV} (or link_secret in the secrets file) to a long "
                         "random string, the same one the alert cycle signs with")
    path = warehouse_path(warehouse_file)
    with warehouse.open_writer(path):
        pass
    with warehouse.open_reader(path) as con:
        cfg = warehouse_config(con, config, write=False)
    server = make_server(path, cfg, key, host=host, port=port)
    typer.echo(f"answering owners' links on http://{host}:{server.server_address[1]} (Ctrl-C stops)")
    try:
        server.serve_forever()
    finally:
        server.server_close()
