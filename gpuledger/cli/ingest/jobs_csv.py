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
    from gpuledger.ingest.device_links import link_devices_for_jobs
    from gpuledger.ingest.jobs.checks import job_limits
    from gpuledger.ingest.jobs.jobs_csv import CsvHeaderError, read_jobs_csv
    from gpuledger.ingest.tiers import apply_tier_rules

    with warehouse.open_writer(warehouse_path(warehouse_file)) as con:
        # The warehouse's own config (only `config load` replaces it; an empty one takes the file's).
        cfg = warehouse_config(con, config, write=True)
        try:
            parsed = read_jobs_csv(file, set(cfg.projects()), limits=job_limits(con, cfg.policy))
        except CsvHeaderError as exc:
            raise UsageError(str(exc)) from None  # one line, printed by the CLI's error boundary
        with warehouse.transaction(con):  # one unit: a full disk rolls all of it back, not half
            warehouse.upsert(con, "jobs", parsed.jobs)
            link_devices_for_jobs(con, parsed.jobs)
            apply_tier_rules(con)  # cluster rules price jobs without devices
            warehouse.quarantine(con, parsed.rejected)
    console.print(
        f"{file}: {parsed.rows_read} rows read, {parsed.jobs.height} jobs imported, "
        f"{len(parsed.rejected)} quarantined"
    )
    for bad in parsed.rejected[:20]:
        console.print(f"  {bad.location}: {bad.reason}", markup=False)  # the reason quotes the row
    if len(parsed.rejected) > 20:
        console.print(f"  ... and {len(parsed.rejected) - 20} more: `gpuledger warehouse quarantine --source jobs-csv`")
