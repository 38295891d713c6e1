"""The `gpuledger` command line. Each domain keeps its own subcommands beside its code;
this file only assembles them and holds the few commands about the warehouse itself."""

from __future__ import annotations

import typer
from rich.console import Console
from rich.table import Table

from gpuledger import warehouse
from gpuledger.cli_common import ConfigOpt, WarehouseOpt, config_or_exit, warehouse_path
from gpuledger.config import example_config_text, resolve_config_path
from gpuledger.analytics import cli as analytics_cli
from gpuledger.analytics import reports
from gpuledger.ingest.jobs.csv_cli import app as import_app
from gpuledger.ingest.cli import app as ingest_app
from gpuledger.ingest.metrics.nvml_cli import agent_command
from gpuledger.simulator.cli import app as simulate_app

app = typer.Typer(
    help="gpuledger: GPU-time analytics, fair share, budgets, chargeback and idle-GPU enforcement.",
    no_args_is_help=True,
    add_completion=False,
)
config_app = typer.Typer(help="Check or print the config file (org tree, budgets, rate card, policy).",
                         no_args_is_help=True)
app.add_typer(config_app, name="config")
app.add_typer(import_app, name="import")
app.add_typer(simulate_app, name="simulate")
app.add_typer(ingest_app, name="ingest")
app.command("agent")(agent_command)
app.add_typer(analytics_cli.report_app, name="report")
app.command("fairshare")(analytics_cli.fairshare)
app.command("budget")(analytics_cli.budget)
app.command("squatters")(analytics_cli.squatters)
console = Console()


@app.command()
def migrate(warehouse_file: WarehouseOpt = None) -> None:
    """Create the warehouse or bring its schema up to date (numbered migrations)."""
    path = warehouse_path(warehouse_file)
    with warehouse.open_writer(path) as con:
        version = warehouse.schema_version(con)
    console.print(f"warehouse {path}: schema version {version}")


@config_app.command("check")
def config_check(config: ConfigOpt = None) -> None:
    """Validate the config; errors name the field and the fix."""
    cfg = config_or_exit(config)
    console.print(
        f"{resolve_config_path(config)}: ok — {len(cfg.node_names())} org nodes, "
        f"{len(cfg.projects())} projects, {len(cfg.budgets)} budgets, {len(cfg.rate_card)} rates"
    )


@config_app.command("example")
def config_example() -> None:
    """Print the documented example config (start your own from it)."""
    typer.echo(example_config_text(), nl=False)


@config_app.command("load")
def config_load(config: ConfigOpt = None, warehouse_file: WarehouseOpt = None) -> None:
    """Write the config's org tree, budgets and rate card into the warehouse."""
    cfg = config_or_exit(config)
    with warehouse.open_writer(warehouse_path(warehouse_file)) as con:
        warehouse.replace_reference(con, cfg.org_frame(), cfg.budgets_frame(), cfg.rate_card_frame())
    console.print(f"loaded {len(cfg.node_names())} org nodes, {len(cfg.budgets)} budgets, "
                  f"{len(cfg.rate_card)} rates")


@app.command()
def summary(warehouse_file: WarehouseOpt = None) -> None:
    """What the warehouse holds: GPUs, jobs, allocated GPU-hours, samples, quarantined lines."""
    with warehouse.open_reader(warehouse_path(warehouse_file)) as con:
        figures = reports.warehouse_summary(con)
    table = Table(title=f"gpuledger warehouse {warehouse_path(warehouse_file)}")
    table.add_column("figure")
    table.add_column("value", justify="right")
    for name, value in figures.items():
        shown = f"{value:,.1f}" if isinstance(value, float) else f"{value:,}" if isinstance(value, int) else str(value)
        table.add_row(name, shown)
    console.print(table)


@app.command("quarantine")
def quarantine_list(
    warehouse_file: WarehouseOpt = None,
    source: str | None = typer.Option(None, help="only this source, e.g. jobs-csv or scrape"),
    limit: int = typer.Option(20, help="rows to show"),
) -> None:
    """Show quarantined input: where it came from, why it was refused, the raw text."""
    with warehouse.open_reader(warehouse_path(warehouse_file)) as con:
        rows = con.execute(
            "SELECT source, location, reason, left(raw_text, 80) FROM quarantine "
            "WHERE ? IS NULL OR source = ? ORDER BY quarantined_at DESC, location LIMIT ?",
            [source, source, limit],
        ).fetchall()
    table = Table(title="quarantine")
    for col in ("source", "location", "reason", "raw text"):
        table.add_column(col)
    for row in rows:
        table.add_row(*[str(v) for v in row])
    console.print(table)


def main() -> None:
    """The `gpuledger` program: known problems end in one line naming the fix, not a traceback."""
    try:
        app()
    except warehouse.WarehouseError as exc:
        Console(stderr=True).print(f"[red]gpuledger: {exc}[/red]")
        raise SystemExit(2) from None


if __name__ == "__main__":
    main()
