"""`gpuledger ingest ...`: one command per source; each source keeps its command beside its code."""

from __future__ import annotations

import typer

from gpuledger.ingest import link_cli
from gpuledger.ingest.holdings import slurm_cli as holdings_slurm_cli
from gpuledger.ingest.jobs import kubernetes_cli, slurm_cli
from gpuledger.ingest.metrics import scrape_cli

app = typer.Typer(
    help="Bring metrics and job records from real sources into the warehouse.", no_args_is_help=True
)
for source_app in (scrape_cli.app, kubernetes_cli.app, slurm_cli.app, link_cli.app, holdings_slurm_cli.app):
    app.registered_commands.extend(source_app.registered_commands)
