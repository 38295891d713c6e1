"""The `gpuledger` command line. Each domain keeps its own subcommands beside its code;
this file only assembles them and holds the few commands about the warehouse itself."""

from __future__ import annotations

import os

import typer
from rich.console import Console

from gpuledger import warehouse
from gpuledger.cli_common import ConfigOpt, WarehouseOpt, config_or_exit, warehouse_path
from gpuledger.errors import GpuledgerError, printable
from gpuledger.config_files import example_config_text, resolve_config_path
from gpuledger import table_views, tables
from gpuledger.analytics import cli as analytics_cli
from gpuledger.ledger import cli as ledger_cli
from gpuledger.reports import cli as reports_cli
from gpuledger.alerts.cli import alerts_app
from gpuledger.metrics.cli import metrics_app
from gpuledger.lazy import lazy_import
from gpuledger.ingest.jobs.csv_cli import app as import_app
from gpuledger.enforce.cli import app as enforce_app
from gpuledger.ingest.cli import app as ingest_app
from gpuledger.ingest.metrics.nvml_cli import agent_command
from gpuledger.simulator.cli import app as simulate_app
from gpuledger.warehouse_cli import app as warehouse_app
from gpuledger.pipelines.cli import app as pipelines_app
from gpuledger.whatif.cli import app as whatif_app

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
app.add_typer(warehouse_app, name="warehouse")
app.command("agent")(agent_command)
app.add_typer(analytics_cli.report_app, name="report")
analytics_cli.report_app.command("statement")(reports_cli.statement)
analytics_cli.report_app.command("weekly")(reports_cli.weekly)
app.add_typer(ledger_cli.period_app, name="period")
app.add_typer(enforce_app, name="enforce")
app.add_typer(pipelines_app, name="pipelines")
app.add_typer(alerts_app, name="alerts")
app.add_typer(metrics_app, name="metrics")
app.add_typer(whatif_app, name="whatif")
app.command("fairshare")(analytics_cli.fairshare)
app.command("budget")(analytics_cli.budget)
app.command("squatters")(analytics_cli.squatters)
console = Console()
DEBUG_ENV = "GPULEDGER_DEBUG"
_debug = False  # set by the --debug option
reports = lazy_import("gpuledger.analytics.reports")


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


config_app.command("load")(ledger_cli.config_load)
config_app.command("versions")(ledger_cli.config_versions)


@app.command()
def summary(warehouse_file: WarehouseOpt = None) -> None:
    """What the warehouse holds: GPUs, jobs, allocated GPU-hours, samples, quarantined lines, and
    disk use per table."""
    import polars as pl

    from gpuledger.warehouse_cli import DISK, disk_use_frame

    with warehouse.open_reader(warehouse_path(warehouse_file)) as con:
        figures = reports.warehouse_summary(con)
        disk = disk_use_frame(con)
    frame = pl.DataFrame({"figure": list(figures), "value": [tables.format_value(v) for v in figures.values()]})
    tables.print_table(frame, table_views.SUMMARY, title=f"gpuledger warehouse {warehouse_path(warehouse_file)}")
    tables.print_table(disk, DISK, title="disk use per table")


@app.command("quarantine")
def quarantine_list(
    warehouse_file: WarehouseOpt = None,
    source: str | None = typer.Option(None, help="only this source, e.g. jobs-csv or scrape"),
    limit: int = typer.Option(20, min=0, help="rows to show"),
    wide: bool = tables.WideOpt, columns: str | None = tables.ColumnsOpt,
) -> None:
    """Show quarantined input: where it came from, why it was refused, the raw text."""
    import polars as pl

    with warehouse.open_reader(warehouse_path(warehouse_file)) as con:
        rows = con.execute(
            "SELECT quarantined_at, source, location, reason, left(raw_text, 80) FROM quarantine "
            "WHERE ? IS NULL OR source = ? ORDER BY quarantined_at DESC, source, location, reason, raw_text LIMIT ?",
            [source, source, limit],
        ).fetchall()
    names = ("quarantined_at", "source", "location", "reason", "raw_text")
    # never raw bytes or control characters to the terminal
    frame = pl.DataFrame([[r[0], *(printable(str(v)) for v in r[1:])] for r in rows], schema=names, orient="row")
    tables.print_table(frame, table_views.QUARANTINE, title="quarantine (newest first)", wide=wide, columns=columns)


@app.callback()
def _root(
    debug: bool = typer.Option(False, "--debug", envvar=DEBUG_ENV,
                               help=f"show the Python traceback of an error (env {DEBUG_ENV}=1)"),
) -> None:
    """gpuledger: GPU-time analytics, fair share, budgets, chargeback and idle-GPU enforcement."""
    global _debug
    _debug = debug


def _known_exit_code(exc: BaseException) -> int | None:
    """The exit code of a problem whose message says what to fix; None for anything else."""
    if isinstance(exc, GpuledgerError):  # ConfigError too
        return exc.exit_code
    # Checked by name (subclasses too): importing their modules here would load DuckDB for `--help`.
    names = {cls.__name__ for cls in type(exc).__mro__}
    if "WarehouseError" in names:
        return getattr(exc, "exit_code", 2)
    if "MissingExtra" in names:
        return getattr(exc, "exit_code", 1)
    return None


def main() -> None:
    """The `gpuledger` program: a known problem (a user's mistake, a broken environment, a source
    answering wrongly) ends in ONE line naming the file, line, field or option and the fix, exit 2
    for a usage error and 1 for a failed run; anything else in one "internal error" line. With
    --debug (or $GPULEDGER_DEBUG=1) the traceback is shown instead."""
    try:
        # not standalone: typer's own usage errors come here too, to be told in one line; a
        # command's typer.Exit(n) comes back as n (commands return None, so anything else is a code)
        code = app(standalone_mode=False)
        if isinstance(code, int) and code:
            raise SystemExit(code)
    except typer.Abort:
        typer.secho("gpuledger: aborted", err=True, fg="red")
        raise SystemExit(1) from None
    except Exception as exc:  # noqa: BLE001 - the one error boundary of the program
        if _debug or os.environ.get(DEBUG_ENV, "").lower() in ("1", "true", "yes"):
            raise
        if isinstance(exc, typer.TyperException) and hasattr(exc, "format_message"):
            # an option typer/click refused: which command, what is wrong, where the help is
            ctx = getattr(exc, "ctx", None)
            where = ctx.command_path if ctx is not None else "gpuledger"
            message = " ".join(exc.format_message().split())
            hint = f" (see `{where} --help`)" if exc.exit_code == 2 else ""
            if message:  # empty: a group called without a command, whose help was just shown
                typer.secho(f"{where}: {printable(message)}{hint}", err=True, fg="red")
            raise SystemExit(exc.exit_code) from None
        code = _known_exit_code(exc)
        lines = (str(exc).strip() or type(exc).__name__).splitlines()
        if code is None and isinstance(exc, OSError) and exc.filename:
            # the environment refused a file (disk full, read-only, permissions): it names the file
            code, lines = 1, [f"{exc.filename}: {exc.strerror or exc}; check the path, its permissions "
                              "and the free disk space"]
        if code is None:
            code = 1
            lines = [f"internal error: {type(exc).__name__}: {lines[0]}; rerun with --debug and report it"]
        # a config error lists one problem per line; raw text from a source is escaped
        typer.secho("\n".join(f"gpuledger: {printable(lines[0])}" if i == 0 else printable(line)
                              for i, line in enumerate(lines)), err=True, fg="red")
        raise SystemExit(code) from None

if __name__ == "__main__":
    main()
