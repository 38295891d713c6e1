"""`gpuledger ingest slurm`: Slurm job records from a sacct export or a live sacct call."""

from __future__ import annotations

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
        None, "--format", help="export format (default: from the file's first character; live: parsable)",
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
    from gpuledger.ingest.jobs.slurm import (
        LIVE_ORIGIN,
        SACCT_FIELDS,
        SacctCallError,
        SacctFormatError,
        parse_sacct,
        parse_squeue_reasons,
        run_sacct,
        run_squeue,
        summary_line,
        unlisted_pending,
        with_live_reasons,
        write_batch,
    )

    if (file is None) == (not live):
        console.print("[red]give exactly one of --file F or --live[/red]")
        raise typer.Exit(2)
    try:
        if live:
            chosen = (fmt or SacctFormat.parsable).value
            text = run_sacct(chosen, start, end, tz=tz, sacct=sacct)
            origin = LIVE_ORIGIN
        else:
            chosen = fmt.value if fmt else "auto"
            try:
                text = file.read_text(encoding="utf-8", errors="replace")
            except OSError as exc:  # /proc/self/mem (EIO), a FIFO nobody writes, ...
                raise UsageError(f"--file {file}: cannot be read ({exc.strerror or exc}); give a saved `sacct "
                                 "--json` or `sacct --parsable2` export") from None
            origin = str(file)
        batch = parse_sacct(text, fmt=chosen, origin=origin, cluster=cluster, tz=tz)
    except (SacctFormatError, SacctCallError, ValueError) as exc:
        # one line, not rich markup: sacct's own words; the fields it needs when the export lacks them
        fields = (f" (expected fields: {','.join(SACCT_FIELDS)})"
                  if isinstance(exc, SacctFormatError) and "--format=" not in str(exc) else "")
        typer.secho(f"gpuledger: {printable(str(exc), 600)}{fields}", err=True, fg="red")
        # sacct missing or failing is a failed run; an unreadable export is the user's to fix
        raise typer.Exit(1 if isinstance(exc, SacctCallError) else 2) from None
    if live:  # the controller's pending Reason (sacct's stays None until the job's next event)
        import polars as pl

        squeue = str(Path(sacct).with_name("squeue")) if "/" in sacct else "squeue"
        try:
            live_reasons = parse_squeue_reasons(run_squeue(squeue=squeue))
            missing = unlisted_pending(batch, live_reasons)
            if missing:  # held / begin-time / dependency jobs: no window lists them, -j does
                more = parse_sacct(run_sacct(chosen, start, end, tz=tz, sacct=sacct, jobs=missing), fmt=chosen,
                                   origin=origin, cluster=cluster, tz=tz)
                batch.jobs = pl.concat([batch.jobs, more.jobs], how="vertical_relaxed").unique(
                    ["cluster", "job_id"], keep="first", maintain_order=True)
                batch.rejected.extend(more.rejected)
                batch.records_read += more.records_read
                batch.skipped_no_gpu += more.skipped_no_gpu
            with_live_reasons(batch, live_reasons)
        except (SacctCallError, SacctFormatError) as exc:
            batch.warnings.append(f"pending jobs' Slurm reasons not read: {exc}")
    for warning in batch.warnings:
        console.print(f"[yellow]{escape(warning)}[/yellow]")
    with warehouse.open_writer(warehouse_path(warehouse_file)) as con:
        result = write_batch(con, batch)
    console.print(summary_line(batch, result, origin))
    for bad in batch.rejected[:20]:
        console.print(f"  {bad.location}: {bad.reason}", markup=False)  # the reason quotes the row
    if len(batch.rejected) > 20:
        console.print(f"  ... and {len(batch.rejected) - 20} more: `gpuledger warehouse quarantine --source slurm-sacct`")
