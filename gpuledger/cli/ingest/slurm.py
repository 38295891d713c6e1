"""`gpuledger ingest slurm`: Slurm job records from a sacct export or a live sacct call."""

from __future__ import annotations

import itertools
from contextlib import ExitStack, contextmanager
from enum import Enum
from pathlib import Path

import typer
from rich.console import Console
from rich.markup import escape

from gpuledger import warehouse
from gpuledger.cli.options import WarehouseOpt, warehouse_path
from gpuledger.errors import UsageError, printable

app = typer.Typer(help="Bring job records into the warehouse.", no_args_is_help=True)
console = Console(stderr=True, soft_wrap=True)


class SacctFormat(str, Enum):
    json = "json"
    parsable = "parsable"


@app.command("slurm")
def slurm(
    file: Path | None = typer.Option(
        None, "--file", exists=True, dir_okay=False,
        help="a saved `sacct -a -X --json` or `sacct -a -X --parsable2 --format=...` export",
    ),
    live: bool = typer.Option(False, "--live", help="run sacct here (needs slurm-client and SLURM_CONF)"),
    fmt: SacctFormat | None = typer.Option(
        None, "--input-format", help="the export's format (default: from the file's first character; live: parsable)",
        show_default=False,
    ),
    start: str = typer.Option("now-7days", "--start", help="live: sacct -S (any time sacct accepts)"),
    end: str = typer.Option("now", "--end", help="live: sacct -E"),
    tz: str = typer.Option("UTC", "--tz", help="zone of the export's times (parsable); live: sacct's TZ"),
    cluster: str | None = typer.Option(
        None, "--cluster", help="cluster name for exports without a Cluster column / JSON cluster",
    ),
    sacct: str = typer.Option("sacct", "--sacct", help="the sacct binary to run (live)"),
    warehouse_file: WarehouseOpt = None,
) -> None:
    """Import Slurm jobs that hold or ask for GPUs: account → project, AllocTRES → GPUs and model.

    Unreadable lines go to quarantine (source slurm-sacct) beside the good ones; re-importing
    changes nothing, and a newer export updates a job's state and end time.
    """
    from gpuledger.ingest.jobs.sacct_import import import_batches, open_export
    from gpuledger.ingest.jobs.slurm import (
        LIVE_ORIGIN,
        SacctCallError,
        parse_sacct,
        run_sacct,
        with_controller_reasons,
    )

    if (file is None) == (not live):
        console.print("[red]give exactly one of --file F or --live[/red]")
        raise typer.Exit(2)
    with _sacct_errors(), ExitStack() as stack:
        if live:  # one call's window, read whole: the controller's reasons are joined onto it
            origin, chosen = LIVE_ORIGIN, (fmt or SacctFormat.parsable).value
            try:
                text = run_sacct(chosen, start, end, tz=tz, sacct=sacct)
            except (SacctCallError, ValueError) as exc:  # sacct missing or failing is a failed run
                typer.secho(f"gpuledger: {printable(str(exc), 600)}", err=True, fg="red")
                raise typer.Exit(1 if isinstance(exc, SacctCallError) else 2) from None
            batch = parse_sacct(text, fmt=chosen, origin=origin, cluster=cluster, tz=tz)
            del text
            with_controller_reasons(batch, chosen, start=start, end=end, tz=tz, sacct=sacct, cluster=cluster)
            batches = iter([batch])
        else:  # a saved export, read a batch of jobs at a time (memory follows the batch)
            origin = str(file)
            try:
                batches = stack.enter_context(open_export(file, fmt.value if fmt else "auto", cluster=cluster, tz=tz))
                # the first batch before the warehouse is opened: an export that cannot be read at
                # all (no header, not JSON) writes nothing, not even a new warehouse file
                first = next(batches)
            except OSError as exc:  # /proc/self/mem (EIO), a FIFO nobody writes, ...
                raise UsageError(f"--file {file}: cannot be read ({exc.strerror or exc}); give a saved `sacct "
                                 "--json` or `sacct --parsable2` export") from None
            batches = itertools.chain([first], batches)
        with warehouse.open_writer(warehouse_path(warehouse_file)) as con:
            done = import_batches(con, batches, origin)
    for warning in done.warnings:
        console.print(f"[yellow]{escape(warning)}[/yellow]")
    console.print(done.summary(origin))
    for bad in done.first_rejected:
        console.print(f"  {bad.location}: {bad.reason}", markup=False)  # the reason quotes the row
    if done.quarantined > len(done.first_rejected):
        console.print(f"  ... and {done.quarantined - len(done.first_rejected)} more: "
                      "`gpuledger warehouse quarantine --source slurm-sacct`")


@contextmanager
def _sacct_errors():
    """An export gpuledger cannot read: one line, exit 2 (sacct's own words; the fields it needs
    when the export lacks them)."""
    from gpuledger.ingest.jobs.slurm import SACCT_FIELDS, SacctFormatError

    try:
        yield
    except SacctFormatError as exc:
        fields = (f" (expected fields: {','.join(SACCT_FIELDS)})"
                  if isinstance(exc, SacctFormatError) and "--format=" not in str(exc) else "")
        typer.secho(f"gpuledger: {printable(str(exc), 600)}{fields}", err=True, fg="red")
        raise typer.Exit(2) from None
