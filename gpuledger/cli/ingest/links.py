"""`gpuledger ingest link-devices`: derive job -> device allocations from DCGM sample labels over
a time range (ingestion does this as data arrives; this re-runs it, e.g. after a bulk import)."""

from __future__ import annotations

import typer
from rich.console import Console

from gpuledger import warehouse
from gpuledger.cli.options import WarehouseOpt, existing_warehouse, utc_range

app = typer.Typer()
console = Console(stderr=True)


@app.command("link-devices")
def link_devices_command(
    start: str = typer.Option(..., help="UTC start (ISO-8601 or epoch s)"),
    end: str = typer.Option(..., help="UTC end, exclusive"),
    warehouse_file: WarehouseOpt = None,
) -> None:
    """Give Kubernetes pods and Slurm jobs the devices DCGM's pod / hpc_job labels saw them on."""
    from gpuledger.ingest.device_links import link_devices

    lo, hi = utc_range(start, end)
    with warehouse.open_writer(existing_warehouse(warehouse_file)) as con:
        written = link_devices(con, start=lo, end=hi)
    console.print(f"{written} job x device intervals derived from sample labels in [{lo}, {hi}) UTC")
