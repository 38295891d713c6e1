"""`gpuledger agent`: sample this node's GPUs through NVML into the warehouse.

``app`` carries the one command ``agent``; ``agent_command`` is the same function for a parent app
that registers it directly (``root.command("agent")(agent_command)``).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from datetime import datetime
from typing import Annotated, Any

import typer

from gpuledger import warehouse
from gpuledger.cli_common import WarehouseOpt, warehouse_path
from gpuledger.ingest.metrics.nvml import (
    DeviceReading,
    NoDriverError,
    NoGpuError,
    local_host,
    read_devices,
    readings_frames,
    sample_ts,
    shutdown,
    start,
    write_readings,
)

app = typer.Typer(help="Run on a GPU node: sample its GPUs into the warehouse.", no_args_is_help=True)


@app.callback()
def _group() -> None:
    """Run on a GPU node: sample its GPUs into the warehouse."""


def run_agent(
    *,
    warehouse_file,
    cluster: str,
    host: str,
    interval_s: float,
    rounds_per_write: int,
    count: int = 0,
    nvml: Any = None,
    stop: threading.Event | None = None,
    clock: Callable[[], datetime] = sample_ts,
    on_write: Callable[[int], None] | None = None,
) -> int:
    """Sample every ``interval_s`` seconds, writing every ``rounds_per_write`` rounds, until ``count``
    rounds (0 = forever) or ``stop``. Returns the sample rows written. ``nvml`` defaults to pynvml.

    Raises NoDriverError when NVML cannot start.
    """
    nvml = start(nvml)
    stop = stop or threading.Event()
    pending: list[tuple[datetime, list[DeviceReading]]] = []
    written = 0

    def flush() -> None:
        nonlocal written, pending
        if not pending:
            return
        inventory, samples = readings_frames(pending, cluster=cluster, host=host)
        with warehouse.open_writer(warehouse_file) as con:
            new = write_readings(con, inventory, samples)
        written += new
        pending = []
        if on_write:
            on_write(new)

    try:
        taken = 0
        while not stop.is_set():
            began = time.monotonic()
            readings = read_devices(nvml)
            if not readings and taken == 0:
                raise NoGpuError("NVML reports no GPUs")
            pending.append((clock(), readings))
            taken += 1
            if len(pending) >= rounds_per_write:
                flush()
            if count and taken >= count:
                break
            stop.wait(max(0.0, interval_s - (time.monotonic() - began)))
    finally:
        try:
            flush()
        finally:
            shutdown(nvml)
    return written


@app.command("agent")
def agent_command(
    interval: Annotated[float, typer.Option(min=0.1, help="seconds between samples")] = 10.0,
    write_every: Annotated[
        int,
        typer.Option(
            min=1, help="sampling rounds gathered per warehouse write (each write publishes a snapshot)"
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
        typer.echo("gpuledger agent: NVML reports no GPUs on this host; run it on a GPU node", err=True)
        raise typer.Exit(1) from None
    except NoDriverError as exc:
        typer.echo(f"gpuledger agent: no NVIDIA driver on this host ({exc}); run it on a GPU node", err=True)
        raise typer.Exit(1) from None
    except KeyboardInterrupt:
        raise typer.Exit(130) from None
    typer.echo(f"gpuledger agent: wrote {written} samples")
