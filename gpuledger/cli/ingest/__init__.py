"""`gpuledger ingest ...`: every source into the warehouse, one module per source here — DCGM
metrics (scrape, prometheus), job records (kubernetes, slurm, jobs-csv), the devices jobs held
(slurm-gpus, node-holdings, link-devices), and the agents of one node (`ingest agent nvml`,
`ingest agent pod-resources`; agent.py). `ingest pod-resources`, the latter's old name, was removed:
it answers with the new name."""

from __future__ import annotations

import typer
from typer.core import TyperGroup

from gpuledger.cli.ingest import agent, holdings, jobs_csv, kubernetes, links, metrics, slurm
from gpuledger.cli.tree import removed_name

# removed old name in this group -> the path under `ingest` that replaced it
OLD_NAMES = {"pod-resources": ("agent", "pod-resources")}


class IngestGroup(TyperGroup):
    """The ingest group; a removed old name answers with the command that replaced it."""

    def get_command(self, ctx, name):
        if name in OLD_NAMES and name not in self.commands:
            return removed_name(f"ingest {name}", "ingest " + " ".join(OLD_NAMES[name]))
        return super().get_command(ctx, name)


app = typer.Typer(
    cls=IngestGroup,
    help="Bring metrics and job records from real sources into the warehouse; the agents of a node.",
    no_args_is_help=True,
)
for source_app in (metrics.app, kubernetes.app, slurm.app, holdings.app, jobs_csv.app, links.app):
    app.registered_commands.extend(source_app.registered_commands)
app.add_typer(agent.app, name="agent")
