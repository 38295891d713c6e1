"""`gpuledger ingest agent pod-resources` (listed under `ingest agent`, agent.py): the Kubernetes
node agent reading the kubelet's PodResources API (read-only) into device holdings, in the
warehouse or (--spool, on a cluster) in the node spool the writer reads (holdings/node_spool.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

from gpuledger.cli.options import WarehouseOpt, warehouse_path
from gpuledger.rules.clock import utc_now

app = typer.Typer(help="Run on a Kubernetes GPU node: which pod holds which GPU.", no_args_is_help=True)
console = Console(stderr=True, soft_wrap=True)


@app.command("pod-resources")
def pod_resources_command(
    socket_path: Annotated[str, typer.Option("--socket", help="the kubelet's pod-resources socket")] =
        "/var/lib/kubelet/pod-resources/kubelet.sock",
    interval: Annotated[float, typer.Option(min=0.5, help="seconds between polls")] = 10.0,
    count: Annotated[int, typer.Option(min=0, help="stop after this many polls; 0 = until interrupted")] = 0,
    once: Annotated[bool, typer.Option("--once", help="poll once, write and exit")] = False,
    timeout: Annotated[float, typer.Option(min=0.1, help="seconds a kubelet call may take")] = 10.0,
    cluster: Annotated[str, typer.Option(envvar="GPULEDGER_CLUSTER", help="cluster name")] = "local",
    host: Annotated[str | None, typer.Option(envvar="NODE_NAME",
                                             help="node name to record (default: this host, short)")] = None,
    resource: Annotated[list[str] | None, typer.Option(
        "--resource", help="resource names to record (globs; default nvidia.com/gpu, nvidia.com/mig-*)")] = None,
    spool: Annotated[Path | None, typer.Option(
        "--spool", envvar="GPULEDGER_NODE_SPOOL",
        help="write this node's holdings into a file in DIR (shared with the writer, which runs "
             "`ingest node-holdings --spool DIR`) instead of the warehouse: for a node other than the writer's")] = None,
    sharing_config: Annotated[Path | None, typer.Option(
        "--sharing-config", envvar="GPULEDGER_SHARING_CONFIG", dir_okay=False,
        help="the NVIDIA device plugin's config file (its ConfigMap, mounted): time-slicing / MPS replicas per "
             "GPU, used where the kubelet does not serve GetAllocatableResources")] = None,
    warehouse_file: WarehouseOpt = None,
) -> None:
    """Poll the kubelet's PodResources v1 List and GetAllocatableResources and record which pod
    and container holds which GPU, MIG instance or time-sliced replica, first and last seen.
    Those holdings then decide attribution over dcgm-exporter's pod labels. Read-only. On a
    cluster, run it with --spool (the DaemonSet does): the warehouse has one writer."""
    from gpuledger.ingest.holdings.devices import mig_uuid_map
    from gpuledger.ingest.holdings.pod_resources import (
        GPU_RESOURCES,
        PodResourcesClient,
        PodResourcesError,
        run_pod_resources_agent,
    )
    from gpuledger.ingest.metrics.dcgm_fields import canonical_host
    from gpuledger.ingest.metrics.nvml import local_host

    configured = _configured_replicas(sharing_config) if sharing_config is not None else None
    node = canonical_host(host) if host else local_host()
    written = {"rows": 0, "linked": 0}
    if spool is not None:
        resume, write, where = _spool_writer(spool, cluster, node, written)
    else:
        (resume, write), where = _warehouse_writer(warehouse_path(warehouse_file), cluster, node, written), None
    try:
        client = PodResourcesClient(socket_path, timeout_s=timeout)
    except PodResourcesError as exc:
        typer.secho(f"gpuledger: {exc}", err=True, fg="red")
        raise typer.Exit(2) from None
    try:
        polls = run_pod_resources_agent(client, write, cluster=cluster, host=node, interval_s=interval,
                                        count=1 if once else count, mig_map=mig_uuid_map(),
                                        resources=tuple(resource or GPU_RESOURCES), resume=resume,
                                        configured=configured)
    except PodResourcesError as exc:
        typer.secho(f"gpuledger: {exc}", err=True, fg="red")
        raise typer.Exit(1) from None
    except KeyboardInterrupt:
        raise typer.Exit(130) from None
    finally:
        client.close()
    last = f"{polls} polls of {client.socket_path}; last: {written['rows']} holdings on {node}"
    if client.allocatable_missing:  # an older kubelet, or its feature gate off: List alone
        shares = (f"time-sliced replica shares from {sharing_config}" if configured
                  else "time-sliced replica shares unknown (--sharing-config names the device plugin's replicas)")
        last += (f" (the kubelet does not serve GetAllocatableResources: {client.allocatable_missing}; holdings "
                 f"from List, {shares})")
    console.print(f"{last}, in {where}" if where is not None
                  else f"{last}, {written['linked']} job x device intervals linked", markup=False)


def _configured_replicas(path: Path) -> dict[str, int]:
    """--sharing-config read (exit 2, one line, where it cannot be)."""
    from gpuledger.ingest.holdings.pod_resources import configured_replicas

    try:
        return configured_replicas(path.read_text(encoding="utf-8"), f"--sharing-config {path}")
    except (OSError, UnicodeDecodeError) as exc:
        typer.secho(f"gpuledger: --sharing-config {path}: cannot be read ({getattr(exc, 'strerror', None) or exc})",
                    err=True, fg="red")
        raise typer.Exit(2) from None
    except ValueError as exc:
        typer.secho(f"gpuledger: {exc}", err=True, fg="red")
        raise typer.Exit(2) from None


def _spool_writer(spool: Path, cluster: str, node: str, written: dict):
    """(the open holdings to resume, the poll's writer, the node's file): the node's file in the
    shared spool, which the writer reads (node_spool.py); a --spool that is no folder is exit 2."""

    from gpuledger.ingest.holdings.node_spool import open_rows, spool_file, write_node

    if not spool.is_dir():
        typer.secho(f"gpuledger: --spool {spool}: not a directory (mount the spool volume there)", err=True,
                    fg="red")
        raise typer.Exit(2)

    def write(rows: list[dict]) -> None:
        written["rows"] = len(rows)
        write_node(spool, cluster, node, rows, utc_now())

    return open_rows(spool, cluster, node), write, str(spool_file(spool, cluster, node))


def _warehouse_writer(path: Path, cluster: str, node: str, written: dict):
    """(the open holdings to resume, the poll's writer): straight into the warehouse, each poll's
    holdings linked to the jobs' device intervals."""

    from gpuledger import warehouse
    from gpuledger.ingest.holdings.checks import screen_holdings
    from gpuledger.ingest.holdings.pod_resources import SOURCE
    from gpuledger.ingest.holdings.store import (
        holdings_frame,
        link_holdings,
        open_holdings,
        partitioned_gpus,
        write_holdings,
    )

    with warehouse.open_writer(path) as con:
        resume = open_holdings(con, cluster=cluster, host=node, source=SOURCE)

    def write(rows: list[dict]) -> None:
        now = utc_now()
        with warehouse.open_writer(path) as con:
            rows, refused = screen_holdings(rows, source=SOURCE, now=now,  # as the spool's writer does
                                            partitioned=partitioned_gpus(con))
            frame = holdings_frame(rows)
            write_holdings(con, frame)
            if refused:
                warehouse.quarantine(con, refused)
            if not frame.is_empty():
                written["linked"] = link_holdings(con, since=frame["last_seen"].min()).linked
        written["rows"] = frame.height

    return resume, write
