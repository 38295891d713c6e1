"""`gpuledger ingest link-devices`: the holdings pass (device holdings -> job allocations) from each
cluster's checkpoint, as the pipelines' `holdings_links` runs it every minute; or, with --start and
--end, every link over a time range again from DCGM sample labels and holdings (ingestion does this
as data arrives; a range re-runs it, e.g. after a bulk import)."""

from __future__ import annotations

import typer
from rich.console import Console

from gpuledger import warehouse
from gpuledger.cli.options import WarehouseOpt, existing_warehouse, utc_range

app = typer.Typer()
console = Console(stderr=True)


@app.command("link-devices")
def link_devices_command(
    start: str | None = typer.Option(None, help="UTC start (ISO-8601 or epoch s); with --end: link this range again"),
    end: str | None = typer.Option(None, help="UTC end, exclusive"),
    cluster: list[str] | None = typer.Option(
        None, "--cluster", help="without a range: this cluster's pass only (repeatable; default: every cluster "
        "with holdings)"),
    warehouse_file: WarehouseOpt = None,
) -> None:
    """Place device holdings on their devices (job allocations), and give Kubernetes pods and Slurm
    jobs the devices DCGM's pod / hpc_job labels saw them on. Without --start/--end: the
    incremental holdings pass, per cluster, from where its last pass stopped."""
    if (start is None) != (end is None):
        raise typer.BadParameter("give both --start and --end (a range), or neither (the incremental pass)",
                                 param_hint="--start/--end")
    if start is not None:
        if cluster:
            raise typer.BadParameter("a range is linked for every cluster; --cluster goes with the incremental "
                                     "pass (no --start/--end)", param_hint="--cluster")
        from gpuledger.ingest.device_links import link_devices

        lo, hi = utc_range(start, end)
        with warehouse.open_writer(existing_warehouse(warehouse_file)) as con:
            written = link_devices(con, start=lo, end=hi)
        console.print(f"{written} job x device intervals derived from sample labels in [{lo}, {hi}) UTC")
        return
    from gpuledger.ingest.holdings.store import holding_clusters, holdings_pass

    with warehouse.open_writer(existing_warehouse(warehouse_file)) as con:
        results = [holdings_pass(con, cluster=name) for name in (cluster or holding_clusters(con))]
    if not results:
        console.print("no device holdings in the warehouse: nothing to link")
    for r in results:
        if r.since is None:
            console.print(f"cluster {r.cluster}: no device holdings", markup=False)
            continue
        console.print(f"cluster {r.cluster}: {r.holdings} holdings seen since {r.since:%Y-%m-%d %H:%M:%S} UTC; "
                      f"{r.links.said()}; checkpoint {r.position:%Y-%m-%d %H:%M:%S} UTC", markup=False)
