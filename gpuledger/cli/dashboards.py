"""`gpuledger dashboards serve`: the Streamlit dashboards of the installed package (a container or
a Slurm admin node has no checkout to `streamlit run dashboards/app.py` from)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import typer

from gpuledger.cli.options import WarehouseOpt, warehouse_path

app = typer.Typer(help="The Streamlit dashboards.", no_args_is_help=True)


@app.command("serve")
def serve(
    port: int = typer.Option(8501, "--port", min=1, max=65535, help="TCP port"),
    address: str = typer.Option("127.0.0.1", "--address", help="address to listen on (0.0.0.0: every interface)"),
    warehouse_file: WarehouseOpt = None,
) -> None:
    """Serve the dashboards (read-only on the warehouse; local mode unless the Streamlit secrets
    have an auth section) until stopped; this process becomes Streamlit's."""
    from gpuledger.extras import require

    require("streamlit")
    import gpuledger.dashboards as package

    os.environ["GPULEDGER_WAREHOUSE"] = str(warehouse_path(warehouse_file))
    entry = Path(package.__file__).with_name("app.py")
    argv = [sys.executable, "-m", "streamlit", "run", str(entry), "--server.headless", "true",
            "--server.address", address, "--server.port", str(port), "--browser.gatherUsageStats", "false"]
    sys.stdout.flush()
    os.execv(sys.executable, argv)  # SIGTERM and Ctrl-C then reach Streamlit itself
