"""`gpuledger ingest agent`: sample this node's GPUs through NVML into the warehouse (the top-level
`gpuledger agent` is its deprecated alias)."""

from __future__ import annotations

from typing import Annotated

import typer

from gpuledger.cli.options import WarehouseOpt, warehouse_path

app = typer.Typer(help="Run on a GPU node: sample its GPUs into the warehouse.", no_args_is_help=True)


@app.callback()
def _group() -> None:
    """Run on a GPU node: sample its GPUs into the warehouse."""


@app.command("agent")
def agent_command(
    interval: Annotated[float, typer.Option(min=0.1, help="seconds between samples")] = 10.0,
    write_every: Annotated[
        int,
        typer.Option(
            min=1, help="sampling rounds gathered per warehouse write (readers see each write when it ends)"
        ),
    ] = 6,
    count: Annotated[
        int, typer.Option(min=0, help="stop after this many rounds; 0 = run until interrupted")
    ] = 0,
    once: Annotated[bool, typer.Option("--once", help="take one sample, write it and exit")] = False,
    cluster: Annotated[
        str, typer.Option(envvar="GPULEDGER_CLUSTER", help="cluster name for this node's GPUs")
    ] = "local",
    host: Annotated[
        str | None, typer.Option(help="host name to record (default: this host, short, lower case)")
    ] = None,
    warehouse_file: WarehouseOpt = None,
) -> None:
    """Sample local GPUs (utilisation, memory, power, energy; MIG instances) through NVML every
    --interval seconds into gpu_samples. Needs the NVIDIA driver: exits 1 on a host without one."""
    from gpuledger.ingest.metrics.agent import run_agent
    from gpuledger.ingest.metrics.nvml import NoDriverError, NoGpuError, local_host

    try:
        written = run_agent(
            warehouse_file=warehouse_path(warehouse_file),
            cluster=cluster,
            host=host or local_host(),
            interval_s=interval,
            rounds_per_write=1 if once else write_every,
            count=1 if once else count,
        )
    except NoGpuError:
        typer.echo("gpuledger ingest agent: NVML reports no GPUs on this host; run it on a GPU node", err=True)
        raise typer.Exit(1) from None
    except NoDriverError as exc:
        typer.echo(f"gpuledger ingest agent: no NVIDIA driver on this host ({exc}); run it on a GPU node", err=True)
        raise typer.Exit(1) from None
    except KeyboardInterrupt:
        raise typer.Exit(130) from None
    typer.echo(f"gpuledger ingest agent: wrote {written} samples")
