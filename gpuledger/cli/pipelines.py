"""`gpuledger pipelines ...`: run the Dagster asset graph without a Dagster server.

Dagster is imported only when a command runs (a GPU node installs gpuledger[agent] without it;
the command then names the extra to install)."""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

from gpuledger.cli.options import ConfigOpt, WarehouseOpt, existing_warehouse

app = typer.Typer(help="The Dagster pipelines: run the asset graph once in this process.", no_args_is_help=True)
console = Console()


@app.command("run-once")
def run_once_command(
    warehouse_file: WarehouseOpt = None,
    config: ConfigOpt = None,
    squatting_evaluations: Annotated[int, typer.Option(
        "--squatting-evaluations", min=1,
        help="evaluate squatting this many times, 30 min apart, up to the data's end")] = 6,
) -> None:
    """Materialize every asset once over what the warehouse holds (ingest from the configured
    sources, every day of analytics, squatting, monthly statements) with their checks, and say
    where each output is. Runs are recorded in $DAGSTER_HOME's instance when it is set."""
    from gpuledger.extras import require

    dg = require("dagster")
    from gpuledger.pipelines.run_once import run_once

    path = existing_warehouse(warehouse_file)
    home = os.environ.get("DAGSTER_HOME")
    instance = dg.DagsterInstance.get() if home else dg.DagsterInstance.ephemeral()
    result = run_once(warehouse_path=path, config_path=config, instance=instance,
                      squatting_evaluations=squatting_evaluations,
                      on_step=lambda what: console.print(f"[green]ok[/green] {what}"))
    console.print(f"\n{result.runs} runs: {len(result.days)} days of analytics "
                  f"({result.days[0] if result.days else '-'} .. {result.days[-1] if result.days else '-'}), "
                  f"statements {', '.join(result.months) or 'none'}")
    console.print(f"outputs, tables in the warehouse {Path(path).absolute()}:")
    for table, rows in result.rows.items():
        console.print(f"  {table:<26} {rows:>9,} rows")
    if result.failed_checks:
        console.print("[yellow]asset checks that did not pass:[/yellow] " + "; ".join(result.failed_checks))
    where = (f"recorded in the Dagster instance at {home}" if home
             else "not recorded (set DAGSTER_HOME to keep them)")
    console.print(f"runs {where}. Open the UI: `make dev`, or "
                  f"`DAGSTER_HOME={home or Path.cwd()} .venv/bin/dagster dev -m gpuledger.pipelines.definitions` "
                  "then http://127.0.0.1:3000")


@app.command("daemon")
def daemon_command(
    module: Annotated[str, typer.Option("--module", "-m", help="the code location module")] = "gpuledger.pipelines.definitions",
    warehouse_file: WarehouseOpt = None,
) -> None:
    """The Dagster daemon, guarded: refuses to start at a StatefulSet ordinal other than 0 or while
    another writer holds the warehouse; fails and retries the runs a killed daemon left STARTED
    (their worker gone); then becomes `dagster-daemon run -m MODULE` (same PID, the lease kept).
    Needs $DAGSTER_HOME (the instance)."""
    from gpuledger.extras import require

    dg = require("dagster")
    from gpuledger.cli.options import warehouse_path
    from gpuledger.pipelines import recovery
    from gpuledger.warehouse import writer_guard

    if not os.environ.get("DAGSTER_HOME"):
        console.print("DAGSTER_HOME is not set: the daemon needs the instance's folder (dagster.yaml)",
                      style="red", markup=False)
        raise typer.Exit(2)
    try:
        writer_guard.check_ordinal()
        writer_guard.take_lease(warehouse_path(warehouse_file), role="dagster-daemon")
    except writer_guard.WriterRefused as exc:
        console.print(f"gpuledger pipelines daemon: {exc}", style="red", markup=False, soft_wrap=True)
        raise typer.Exit(exc.exit_code) from None
    logging.disable(logging.WARNING)  # dagster-postgres's "Retrying failed database creation" lines
    try:
        instance = dg.DagsterInstance.get()
    except Exception as exc:  # the instance's database errors become one line; anything else stays
        line = recovery.instance_error(exc, os.environ["DAGSTER_HOME"])
        if line is None:
            raise
        console.print(f"gpuledger pipelines daemon: {line}", style="red", markup=False, soft_wrap=True)
        raise typer.Exit(1) from None
    finally:
        logging.disable(logging.NOTSET)
    with instance:
        recovery.recover_dead_runs(instance, log=lambda line: console.print(line, markup=False, soft_wrap=True))
    recovery.exec_daemon(recovery.daemon_argv(module))
