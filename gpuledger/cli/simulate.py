"""`gpuledger simulate ...`: build the deterministic cluster and write it to the warehouse, serve it
as live dcgm-exporter endpoints, or write it as an OpenMetrics file for Prometheus backfill."""

from __future__ import annotations

import errno
import socket
import time
from datetime import datetime, timedelta
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

from gpuledger import warehouse
from gpuledger.cli.options import (
    ConfigOpt,
    RegimeOpt,
    WarehouseOpt,
    config_or_exit,
    out_file,
    warehouse_config,
    warehouse_path,
)
from gpuledger.errors import RunError, UsageError
from gpuledger.rules.clock import parse_iso, utc_now
from gpuledger.simulator.defaults import DEFAULT_CLUSTER, DEFAULT_START, REGIME_NAMES
from gpuledger.stopping import StopSignals

app = typer.Typer(help="Simulate a GPU cluster deterministically from a seed (same seed => same data).",
                  no_args_is_help=True)
console = Console(stderr=True)

GpusOpt = Annotated[int, typer.Option("--gpus", help="GPUs in the cluster, rounded up to whole 8-GPU nodes", min=8)]
SeedOpt = Annotated[int, typer.Option("--seed", min=0, max=2**32 - 1,  # numpy's seed range
                                      help="random seed; same seed and options => same output")]
IntervalOpt = Annotated[int, typer.Option("--interval", help="sample interval in seconds", min=1)]
ClusterOpt = Annotated[str, typer.Option("--cluster", help="cluster name written to the warehouse")]
CleanOpt = Annotated[bool, typer.Option("--clean/--dirty",
                                        help="--clean leaves out the planted dirt (gaps, blanks, resets, host spellings)")]


def _whole_nodes(gpus: int) -> None:
    """Say how --gpus becomes nodes when it is not a whole number of them (the cluster is built of
    8-GPU nodes), rather than silently changing the count."""
    from gpuledger.simulator.cluster import GPUS_PER_NODE

    nodes = -(-gpus // GPUS_PER_NODE)
    if gpus % GPUS_PER_NODE:
        console.print(f"simulate: --gpus {gpus} rounds up to whole nodes: {nodes} nodes × {GPUS_PER_NODE} GPUs "
                      f"= {nodes * GPUS_PER_NODE} GPUs")


def _parse_start(text: str | None, default: datetime, option: str = "--start") -> datetime:
    if not text:
        return default
    try:
        return parse_iso(text)
    except ValueError:
        raise typer.BadParameter(f"{text!r} is not an ISO date/time such as 2026-11-01T00:00:00",
                                 param_hint=option) from None


@app.command("warehouse")
def simulate_warehouse(
    gpus: GpusOpt = 256,
    days: Annotated[float, typer.Option("--days", help="days to simulate", min=0.01)] = 7.0,
    start: Annotated[str | None, typer.Option("--start", help="window start, ISO, UTC [default 2026-11-01T00:00:00]")] = None,
    seed: SeedOpt = 1,
    interval: IntervalOpt = 30,
    cluster: ClusterOpt = DEFAULT_CLUSTER,
    clean: CleanOpt = False,
    regime: str | None = RegimeOpt,
    warehouse_file: WarehouseOpt = None,
    config: ConfigOpt = None,
) -> None:
    """Write the org config, inventory, jobs, allocations and samples into the warehouse. Idempotent:
    the same window again changes nothing; a later --start appends (job ids carry the window start)."""
    from gpuledger.simulator.scenario import build_cluster
    from gpuledger.simulator.to_warehouse import write_simulation

    began = time.monotonic()
    _whole_nodes(gpus)
    path = warehouse_path(warehouse_file)
    with warehouse.open_writer(path) as con:
        # The warehouse's own config (only `config load` replaces it; an empty one takes the file's).
        cfg = warehouse_config(con, config, write=True)
    # The cluster is built outside the lock (seconds at 4,096 GPUs): readers are not kept waiting.
    sim = build_cluster(seed=seed, gpus=gpus, start=_parse_start(start, DEFAULT_START), days=days,
                        interval_s=interval, cluster=cluster, config=cfg, dirt=not clean,
                        regime=regime or REGIME_NAMES[0])
    with warehouse.open_writer(path) as con:
        with Progress(TextColumn("[bold]simulate[/] {task.description}"), BarColumn(),
                      TextColumn("{task.percentage:>3.0f}%"), TimeElapsedColumn(), TimeRemainingColumn(),
                      console=console, transient=True) as progress:  # Ctrl-C leaves no half-drawn bar
            task = progress.add_task(f"{sim.hardware.n_devices} devices, {sim.workload.jobs.height} jobs",
                                     total=sim.end_s - sim.start_s)
            counts = write_simulation(con, sim, on_chunk=lambda done, total: progress.update(task, completed=done))
    from gpuledger.simulator.to_warehouse import provenance

    scope, position = provenance(sim)
    console.print(f"simulated {scope} (UTC): {position}; {sim.hardware.n_devices} devices, "
                  f"{sim.workload.jobs.height:,} jobs")
    console.print(f"warehouse {path}: " + ", ".join(f"{k} {v:,}" for k, v in counts.items())
                  + f" ({time.monotonic() - began:.1f} s)")


def _listen_error(exc: OSError, bind: str, port: int, nodes: int) -> Exception:
    """Why the exporters could not listen, as the option to change."""
    ports = f"{port}..{port + nodes - 1}" if port else "free ports"
    if isinstance(exc, socket.gaierror) or exc.errno == errno.EADDRNOTAVAIL:
        return UsageError(f"--address {bind}: not an address of this host ({exc.strerror or exc}); "
                          "use 127.0.0.1, 0.0.0.0 or one of this host's addresses")
    if exc.errno == errno.EADDRINUSE:
        return RunError(f"--port: a port in {ports} on {bind} is already in use (another exporter or "
                        f"`simulate serve`?); choose another --port (node i listens on --port + i)")
    if exc.errno == errno.EACCES:
        return RunError(f"--port {port}: permission denied to listen on {bind}:{ports} (ports under "
                        "1024 need root); choose --port 1024 or higher")
    return RunError(f"cannot listen on {bind}:{ports} ({exc.strerror or exc}); check --address and --port")


@app.command("serve")
def simulate_serve(
    port: Annotated[int, typer.Option("--port", min=0, max=65535,
                                      help="first port; node i listens on port+i (0: any free ports)")] = 9400,
    gpus: GpusOpt = 256,
    seed: SeedOpt = 1,
    interval: IntervalOpt = 30,
    speed: Annotated[float, typer.Option("--speed", help="simulated seconds per wall second", min=0.0)] = 1.0,
    timestamps: Annotated[bool, typer.Option(
        "--timestamps/--no-timestamps",
        help="end each sample line with its simulated time, so a scraper stores simulated time (needed for "
             "--speed above 1 to shorten what the warehouse sees, e.g. `make dev`)")] = False,
    catch_up: Annotated[bool, typer.Option(
        "--catch-up", help="with --sim-start in the past: fast-forward at --speed until the simulated time "
                           "reaches now, then run at real time")] = False,
    sim_start: Annotated[str | None, typer.Option("--sim-start", help="simulated time at launch, ISO UTC [default: now]")] = None,
    days: Annotated[float, typer.Option("--days", help="days of jobs after the simulated start", min=0)] = 7.0,
    bind: Annotated[str, typer.Option("--address", help="address to listen on")] = "127.0.0.1",
    cluster: ClusterOpt = DEFAULT_CLUSTER,
    clean: CleanOpt = False,
    config: ConfigOpt = None,
) -> None:
    """Serve live dcgm-exporter /metrics endpoints, one port per node, until Ctrl-C."""
    from gpuledger.simulator.exporter import SimClock, start_exporters
    from gpuledger.simulator.scenario import build_cluster

    cfg = config_or_exit(config)
    now = _parse_start(sim_start, utc_now().replace(microsecond=0), "--sim-start")
    # jobs start a day before the simulated "now", so the cluster is busy when serving begins
    _whole_nodes(gpus)
    sim = build_cluster(seed=seed, gpus=gpus, start=now - timedelta(days=1), days=days + 1,
                        interval_s=interval, cluster=cluster, config=cfg, dirt=not clean)
    nodes = len(sim.hardware.node_host)
    if port and port + nodes - 1 > 65535:
        raise typer.BadParameter(f"{nodes} nodes need ports {port}..{port + nodes - 1}, past 65535; "
                                 f"use --port {65536 - nodes} or lower", param_hint="--port")
    try:
        handle = start_exporters(sim, port, SimClock(now, speed, catch_up=catch_up), host=bind,
                                 timestamps=timestamps)
    except OSError as exc:
        raise _listen_error(exc, bind, port, nodes) from None
    try:
        with StopSignals() as stop:  # SIGINT / SIGTERM: stop serving within a second
            # said once the handlers are in place: a signal right after this line is a clean stop
            console.print(f"serving {len(handle.urls)} node exporters: {handle.urls[0]} .. {handle.urls[-1]} "
                          f"(simulated start {now.isoformat()}Z, speed x{speed}); Ctrl-C stops")
            stop.event.wait()
    finally:
        handle.stop()
    console.print(f"stopped serving ({'Ctrl-C' if stop.exit_code else 'SIGTERM'})")
    raise typer.Exit(stop.exit_code)


@app.command("openmetrics")
def simulate_openmetrics(
    out: Annotated[Path, typer.Option("--out", callback=lambda value: out_file(value),
                                      help="OpenMetrics file to write (its directory must exist)")],
    hours: Annotated[float, typer.Option("--hours", help="hours of samples", min=0.01)] = 1.0,
    gpus: GpusOpt = 256,
    start: Annotated[str | None, typer.Option("--start", help="start, ISO, UTC [default 2026-11-01T00:00:00]")] = None,
    seed: SeedOpt = 1,
    interval: IntervalOpt = 30,
    cluster: ClusterOpt = DEFAULT_CLUSTER,
    clean: CleanOpt = False,
    metrics: Annotated[str | None, typer.Option(
        "--metrics", help="comma-separated DCGM families to write, e.g. DCGM_FI_PROF_SM_ACTIVE [default: all 12]")] = None,
    stream: Annotated[bool, typer.Option(
        "--stream", help="write every 240 sample times as computed (2 h at 30 s: memory of a chunk, not of the span)")] = False,
    config: ConfigOpt = None,
) -> None:
    """Write an OpenMetrics file for `promtool tsdb create-blocks-from openmetrics FILE DIR`."""
    from gpuledger.simulator.exposition import EXPORTED, write_openmetrics
    from gpuledger.simulator.scenario import build_cluster

    families = None
    if metrics is not None:
        families = [m.strip() for m in metrics.split(",") if m.strip()]
        unknown = [m for m in families if m not in EXPORTED]
        if unknown or not families:
            raise UsageError(f"--metrics: {', '.join(unknown) or 'no family named'} is not an exported family; "
                             f"choose from {', '.join(EXPORTED)}")
    cfg = config_or_exit(config)
    _whole_nodes(gpus)
    sim = build_cluster(seed=seed, gpus=gpus, start=_parse_start(start, DEFAULT_START), days=hours / 24,
                        interval_s=interval, cluster=cluster, config=cfg, dirt=not clean)
    with open(out, "w") as handle:
        n = write_openmetrics(sim, handle, sim.start_s, sim.end_s, metrics=families, stream=stream)
    console.print(f"{out}: {n:,} samples, {sim.start.isoformat()}Z .. {sim.end.isoformat()}Z")


__all__ = ["app"]
