"""`gpuledger metrics serve`: gpuledger's figures for Prometheus (prometheus_client, loaded lazily)."""

from __future__ import annotations

import typer

from gpuledger.cli.options import WarehouseOpt, warehouse_path

app = typer.Typer(help="gpuledger's own figures in Prometheus text format.", no_args_is_help=True)


@app.command("serve")
def serve(
    port: int = typer.Option(9464, "--port", min=1, max=65535, help="TCP port for /metrics"),
    host: str = typer.Option("127.0.0.1", "--address",
                             help="address to listen on (0.0.0.0: every interface; the figures name projects)"),
    cache_s: float = typer.Option(30.0, "--cache-seconds", min=0, help="recompute the figures at most this often"),
    warehouse_file: WarehouseOpt = None,
) -> None:
    """Expose fair share, budgets, squatters, wasted GPU-hours, delivery ratio and the alert outbox
    at http://HOST:PORT/metrics, for a Prometheus that already scrapes DCGM."""
    import signal
    import threading

    from gpuledger.errors import RunError
    from gpuledger.extras import require

    require("prometheus_client")
    from gpuledger.errors import UsageError
    from gpuledger.metrics.exporter import serve as start

    path = warehouse_path(warehouse_file)
    if not path.is_file():  # a usage error, as for every other reader (exit 2)
        raise UsageError(f"warehouse {path} does not exist; give --warehouse (or $GPULEDGER_WAREHOUSE) or create it "
                         "with `gpuledger warehouse migrate`")
    stop = threading.Event()
    got: list[int] = []

    def on_signal(signum, _frame):  # SIGINT / SIGTERM: stop serving now, not at the next request
        got.append(signum)
        stop.set()

    previous = {sig: signal.signal(sig, on_signal) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        try:
            server, thread = start(path, port=port, host=host, cache_s=cache_s,
                                   log=lambda line: typer.echo(line, err=True))
        except OSError as exc:
            import errno
            import socket

            if isinstance(exc, socket.gaierror) or exc.errno == errno.EADDRNOTAVAIL:  # the host, not the port
                raise UsageError(f"--address {host}: not an address of this host ({exc.strerror or exc}); use "
                                 "127.0.0.1, 0.0.0.0 or one of this host's addresses") from None
            if exc.errno == errno.EACCES:
                raise RunError(f"--port {port}: permission denied to listen on {host}:{port} (ports under 1024 "
                               "need root); choose --port 1024 or higher") from None
            raise RunError(f"--port {port}: cannot listen on {host}:{port} ({exc.strerror or exc}); choose another "
                           "port") from None
        typer.echo(f"serving gpuledger metrics from {path} on http://{host}:{port}/metrics (Ctrl-C stops)", err=True)
        while not stop.wait(0.2):
            pass
        server.shutdown()
        server.server_close()
        thread.join(timeout=1)
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    typer.echo("gpuledger metrics: stopped", err=True)
    if got and got[0] == signal.SIGINT:
        raise typer.Exit(130)
