"""`gpuledger ingest agent ...`: the long-running agents of one node — `nvml` samples this GPU
node's GPUs through NVML into the warehouse, `pod-resources` (pod_resources.py) records which pod
holds which GPU from the kubelet.

The old spellings were removed: `gpuledger ingest agent [OPTIONS]` (before the agents were a group
it was the NVML agent), the top-level `gpuledger agent` and `gpuledger ingest pod-resources` answer
with one line naming the new command, exit 2."""

from __future__ import annotations

from typing import Annotated

import typer
from typer.core import TyperGroup

from gpuledger.cli.ingest import pod_resources
from gpuledger.cli.options import WarehouseOpt, warehouse_path


class AgentGroup(TyperGroup):
    """`ingest agent` followed by options instead of a command name is the removed old spelling of
    `ingest agent nvml`: one line naming it, exit 2."""

    def parse_args(self, ctx, args):
        if args and args[0].startswith("-") and args[0] not in ctx.help_option_names:
            typer.secho("gpuledger ingest agent [OPTIONS] was removed (deprecated the release before): use "
                        "`gpuledger ingest agent nvml [OPTIONS]`", err=True, fg="red")
            raise typer.Exit(2)
        return super().parse_args(ctx, args)


app = typer.Typer(cls=AgentGroup, no_args_is_help=True,
                  help="The agents of one node: `nvml` on a GPU node, `pod-resources` on a Kubernetes GPU node.")


@app.callback()
def _group() -> None:
    """The agents of one node: `nvml` samples a GPU node's GPUs into the warehouse; `pod-resources`
    records which pod holds which GPU from the kubelet (a DaemonSet)."""


@app.command("nvml")
def agent_command(
    interval: Annotated[float, typer.Option(min=0.1, help="seconds between samples")] = 10.0,
    write_every: Annotated[
        int,
        typer.Option(
            min=1, help="sampling rounds gathered per warehouse write (readers see each write when it ends)"
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
    from gpuledger.ingest.metrics.agent import run_agent
    from gpuledger.ingest.metrics.nvml import NoDriverError, NoGpuError, local_host

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
        typer.echo("gpuledger ingest agent nvml: NVML reports no GPUs on this host; run it on a GPU node", err=True)
        raise typer.Exit(1) from None
    except NoDriverError as exc:
        typer.echo(f"gpuledger ingest agent nvml: no NVIDIA driver on this host ({exc}); run it on a GPU node", err=True)
        raise typer.Exit(1) from None
    except KeyboardInterrupt:
        raise typer.Exit(130) from None
    typer.echo(f"gpuledger ingest agent nvml: wrote {written} samples")


app.registered_commands.extend(pod_resources.app.registered_commands)
