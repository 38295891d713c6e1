"""`gpuledger ingest jobs-csv`: a generic CSV file of job records (`import jobs` is its deprecated alias)."""

from __future__ import annotations

from pathlib import Path

import typer
from rich.console import Console

from gpuledger import warehouse
from gpuledger.cli.options import ConfigOpt, WarehouseOpt, warehouse_config, warehouse_path
from gpuledger.errors import UsageError

app = typer.Typer(help="Import job records from files.", no_args_is_help=True)
console = Console(stderr=True)


@app.command("jobs-csv")
def import_jobs(
    file: Path = typer.Argument(..., exists=True, dir_okay=False, help="generic job CSV (see README)"),
    warehouse_file: WarehouseOpt = None,
    config: ConfigOpt = None,
) -> None:
    """Import a generic job CSV. Bad rows go to quarantine with line numbers; good rows land;
    re-importing the same file changes nothing."""
    from gpuledger.ingest.jobs.checks import job_limits
    from gpuledger.ingest.jobs.csv_import import import_jobs_csv
    from gpuledger.ingest.jobs.jobs_csv import CsvHeaderError

    with warehouse.open_writer(warehouse_path(warehouse_file)) as con:
        # The warehouse's own config (only `config load` replaces it; an empty one takes the file's).
        cfg = warehouse_config(con, config, write=True)
        try:  # read and written a chunk at a time, in one transaction: memory stays flat
            done = import_jobs_csv(con, file, set(cfg.projects()), limits=job_limits(con, cfg.policy))
        except CsvHeaderError as exc:
            raise UsageError(str(exc)) from None  # one line, printed by the CLI's error boundary
    console.print(f"{file}: {done.rows_read} rows read, {done.imported} jobs imported, {done.quarantined} quarantined")
    for bad in done.first_rejected:
        console.print(f"  {bad.location}: {bad.reason}", markup=False)  # the reason quotes the row
    if done.quarantined > 20:
        console.print(f"  ... and {done.quarantined - 20} more: `gpuledger warehouse quarantine --source jobs-csv`")
