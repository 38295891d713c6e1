"""`gpuledger ingest ...`: every source into the warehouse, one module per source here — DCGM
metrics (scrape, prometheus), job records (kubernetes, slurm, jobs-csv), the devices jobs held
(slurm-gpus, node-holdings, link-devices), and the agents of one node (`ingest agent nvml`,
`ingest agent pod-resources`; agent.py). `ingest pod-resources` is the deprecated old name of the
latter."""

from __future__ import annotations

import typer
from typer.core import TyperGroup

from gpuledger.cli.ingest import agent, holdings, jobs_csv, kubernetes, links, metrics, slurm

# old name in this group -> the path under `ingest` that replaces it
OLD_NAMES = {"pod-resources": ("agent", "pod-resources")}


class IngestGroup(TyperGroup):
    """The ingest group with its deprecated old names (hidden from its help, but they still run,
    saying once on stderr which command replaces them)."""

    def get_command(self, ctx, name):
        if name in OLD_NAMES and name not in self.commands:
            from gpuledger.cli.tree import deprecated_copy

            group, sub = OLD_NAMES[name]
            target = super().get_command(ctx, group).get_command(ctx, sub)
            alias = deprecated_copy(target, f"ingest {name}", f"ingest {group} {sub}")
            alias.hidden = True
            return alias
        return super().get_command(ctx, name)


app = typer.Typer(
    cls=IngestGroup,
    help="Bring metrics and job records from real sources into the warehouse; the agents of a node.",
    no_args_is_help=True,
)
for source_app in (metrics.app, kubernetes.app, slurm.app, holdings.app, jobs_csv.app, links.app):
    app.registered_commands.extend(source_app.registered_commands)
app.add_typer(agent.app, name="agent")
