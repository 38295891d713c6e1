"""`gpuledger metrics serve`: gpuledger's figures for Prometheus (prometheus_client, loaded lazily)."""

from __future__ import annotations

import typer

from gpuledger.cli.options import WarehouseOpt, warehouse_path

app = typer.Typer(help="gpuledger's own figures in Prometheus text format.", no_args_is_help=True)


@app.command("serve")
def serve(
    port: int = typer.Option(9464, "--port", min=1, max=65535, help="TCP port for /metrics"),
    host: str = typer.Option("0.0.0.0", "--host", help="address to listen on"),
    cache_s: float = typer.Option(30.0, "--cache-seconds", min=0, help="recompute the figures at most this often"),
    warehouse_file: WarehouseOpt = None,
) -> None:
    """Expose fair share, budgets, squatters, wasted GPU-hours, delivery ratio and the alert outbox
    at http://HOST:PORT/metrics, for a Prometheus that already scrapes DCGM."""
    import threading

    from gpuledger.errors import RunError
    from gpuledger.extras import require

    require("prometheus_client")
    from gpuledger.metrics.exporter import serve as start

    path = warehouse_path(warehouse_file)
    if not path.is_file():
        raise RunError(f"warehouse {path} does not exist; give --warehouse (or $GPULEDGER_WAREHOUSE) or create it "
                       "with `gpuledger warehouse migrate`")
    try:
        start(path, port=port, host=host, cache_s=cache_s)
    except OSError as exc:
        raise RunError(f"--port {port}: cannot listen on {host}:{port} ({exc.strerror or exc}); choose another port") from None
    typer.echo(f"serving gpuledger metrics from {path} on http://{host}:{port}/metrics", err=True)
    threading.Event().wait()
