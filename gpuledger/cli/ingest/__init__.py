"""`gpuledger ingest ...`: every source into the warehouse, one module per source here — DCGM
metrics (scrape, prometheus), job records (kubernetes, slurm, jobs-csv), the devices jobs held
(slurm-gpus, pod-resources, link-devices), and the NVML agent of a GPU node."""

from __future__ import annotations

import typer

from gpuledger.cli.ingest import agent, holdings, jobs_csv, kubernetes, links, metrics, pod_resources, slurm

app = typer.Typer(
    help="Bring metrics and job records from real sources into the warehouse; the agent on a GPU node.",
    no_args_is_help=True,
)
for source_app in (metrics.app, kubernetes.app, slurm.app, holdings.app, pod_resources.app, jobs_csv.app, links.app, agent.app):
    app.registered_commands.extend(source_app.registered_commands)
