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
    # warm before listening: the first visitor after a restart no longer waits on imports and the
    # chart renderer's start, and /_stcore/health (the readiness probe) answers only once warm
    took = warm()
    typer.echo(f"dashboards: warm in {took:.1f} s (chart renderer, the pages' and the statement's code); "
               f"serving http://{address}:{port}")
    sys.stdout.flush()
    from streamlit.web import cli as streamlit_cli

    # Streamlit in this (warm) process, as `streamlit run` would: SIGTERM and Ctrl-C reach it
    sys.argv = ["streamlit", "run", str(entry), "--server.headless", "true", "--server.address", address,
                "--server.port", str(port), "--browser.gatherUsageStats", "false"]
    streamlit_cli.main()


def warm() -> float:
    """Import what the pages and the finance statement run on and start the chart renderer (its
    first drawing takes ~1 s); seconds taken. Code only: no query, nothing cached ahead of a reader."""
    import time

    started = time.monotonic()
    from gpuledger.dashboards import access, charts, queries  # noqa: F401  (the pages' modules)

    charts.warm()
    queries.warm_imports()
    return time.monotonic() - started
