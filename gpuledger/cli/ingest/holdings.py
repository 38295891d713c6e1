"""`gpuledger ingest slurm-gpus`: which GPUs Slurm jobs held, from the prolog spool or scontrol."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

import typer
from rich.console import Console

from gpuledger import warehouse
from gpuledger.cli.options import WarehouseOpt, warehouse_path
from gpuledger.rules.clock import utc_now

app = typer.Typer(help="Bring device holdings into the warehouse.", no_args_is_help=True)
console = Console(stderr=True, soft_wrap=True)


@app.command("slurm-gpus")
def slurm_gpus(
    spool: Path | None = typer.Option(
        None, "--spool", help="the directory deploy/slurm/prolog.sh and epilog.sh write into",
    ),
    scontrol_live: bool = typer.Option(
        False, "--scontrol", help="poll `scontrol -d -o show job` here instead (no prolog needed)",
    ),
    scontrol_json: bool = typer.Option(
        False, "--json", help="with --scontrol: ask `scontrol --json -d show job` (Slurm 23.02+; on 22.05 `squeue --json`, the same job documents) instead of the text",
    ),
    scontrol_file: Path | None = typer.Option(
        None, "--scontrol-file", exists=True, dir_okay=False,
        help="a saved `scontrol -d -o show job` (text) or `scontrol --json -d show job` output",
    ),
    cluster: str | None = typer.Option(
        None, "--cluster", help="cluster name (spool files without SLURM_CLUSTER_NAME; scontrol: required)",
    ),
    tz: str = typer.Option("UTC", "--tz", help="scontrol text: the zone its times are in"),
    scontrol: str = typer.Option("scontrol", "--scontrol-bin", help="the scontrol binary to run"),
    warehouse_file: WarehouseOpt = None,
) -> None:
    """Record which GPU (index, UUID) each Slurm job held on each node, and let those holdings
    decide attribution over the labels on samples. Re-reading the same spool changes nothing;
    unreadable spool files go to quarantine (source slurm-gpus)."""
    from gpuledger.ingest.holdings.screening import Scratch, SpoolScreen

    given = sum((spool is not None, scontrol_live, scontrol_file is not None))
    if given != 1:
        console.print("[red]give exactly one of --spool DIR, --scontrol or --scontrol-file F[/red]")
        raise typer.Exit(2)
    if scontrol_json and not scontrol_live:
        console.print("[red]--json goes with --scontrol (a --scontrol-file is read in either form)[/red]")
        raise typer.Exit(2)
    now = utc_now()
    with Scratch() as scratch:
        screen = SpoolScreen(scratch, source="slurm-gpus", now=now)  # one record at a time, in batches
        if spool is not None:
            origin = _spool_holdings(spool, cluster, scratch, screen)
        else:
            origin = _scontrol_holdings(cluster, now, screen, live=scontrol_live, as_json=scontrol_json,
                                        file=scontrol_file, tz=tz, scontrol=scontrol)
        landed = _land(screen, warehouse_file, now)
    console.print(landed.line(origin, "slurm-gpus"), markup=False)


@dataclass
class _Landed:
    holdings: int = 0
    quarantined: int = 0
    link: object = None  # store.LinkResult, once anything landed

    def line(self, origin: str, source: str) -> str:
        """The command's one summary line."""
        line = f"{self.holdings} GPU holdings from {origin}"
        if self.link is not None:
            line += f"; {self.link.said()}"
        if self.quarantined:
            line += (f"; {self.quarantined} files or records quarantined "
                     f"(`gpuledger warehouse quarantine --source {source}`)")
        return line


def _land(screen, warehouse_file, now: datetime, *, incremental: bool = False) -> _Landed:
    """Write what ``screen`` (holdings.screening.SpoolScreen) lets through and quarantines, a batch
    at a time, then link the holdings written; the warehouse is opened only now, after the read.
    ``incremental``: link by each written cluster's holdings pass (store.holdings_pass, from its
    checkpoint: a node spool re-reads every open holding each minute), else from the earliest
    holding written."""
    from gpuledger.ingest.holdings.store import (
        LinkResult,
        holdings_pass,
        link_holdings,
        partitioned_gpus,
        write_holdings,
    )

    landed = _Landed()
    since, clusters = None, set()
    with warehouse.open_writer(warehouse_path(warehouse_file)) as con:
        for frame, refused in screen.results(partitioned_gpus(con)):
            if refused:
                warehouse.quarantine(con, refused)
                landed.quarantined += len(refused)
            if not frame.is_empty():
                write_holdings(con, frame)
                landed.holdings += frame.height
                clusters |= set(frame["cluster"])
                first = frame["first_seen"].min()
                since = first if since is None else min(since, first)
        if incremental and clusters:
            passes = [holdings_pass(con, cluster=c, now=now).links for c in sorted(clusters)]
            landed.link = LinkResult.total(passes)
        elif since is not None:
            landed.link = link_holdings(con, since=since, now=now)
    return landed


def _spool_holdings(spool: Path, cluster: str | None, scratch, screen) -> str:
    """Stream the prolog/epilog spool into ``screen``; returns where from. Not a folder: exit 2."""
    from gpuledger.ingest.holdings.slurm_spool import stream_spool

    if not spool.is_dir():
        console.print(f"[red]--spool {spool}: not a directory (the prolog's GPULEDGER_GPU_SPOOL)[/red]")
        raise typer.Exit(2)
    files = stream_spool(spool, cluster=cluster, scratch=scratch, holdings=screen.add, bad=screen.refuse)
    return f"{files} spool files in {spool}"


def _scontrol_holdings(cluster: str | None, now: datetime, screen, *, live: bool, as_json: bool,
                       file: Path | None, tz: str, scontrol: str) -> str:
    """Hand the holdings of `scontrol show job` run here (``live``) or saved in ``file``, text or
    JSON, to ``screen``; returns where from. scontrol failing is exit 1 live, 2 for a file."""
    from gpuledger.ingest.holdings.checks import WHERE
    from gpuledger.ingest.holdings.slurm_scontrol import ScontrolError, parse_json, parse_text, run_scontrol

    if not cluster:
        console.print("[red]--cluster NAME is needed with scontrol (its output does not name it)[/red]")
        raise typer.Exit(2)
    from gpuledger.errors import printable

    try:
        text = run_scontrol(scontrol, form="json" if as_json else "text") if live else file.read_text(encoding="utf-8")
        rows = (parse_json(text, cluster=cluster, now=now) if text.lstrip().startswith("{")
                else parse_text(text, cluster=cluster, now=now, tz=tz))
    except ScontrolError as exc:
        typer.secho(f"gpuledger: {'' if live else f'--scontrol-file {file}: '}{printable(str(exc), 400)}", err=True,
                    fg="red")
        raise typer.Exit(1 if live else 2) from None
    except (UnicodeDecodeError, ValueError, TypeError, AttributeError, OverflowError, OSError) as exc:
        # what scontrol itself never prints: a file that is not its output (binary, a foreign JSON)
        what = f"--scontrol-file {file}" if not live else "scontrol's answer"
        typer.secho(f"gpuledger: {what}: not `scontrol -d -o show job` text or `scontrol --json -d show job` "
                    f"output ({printable(str(exc) or type(exc).__name__, 200)})", err=True, fg="red")
        raise typer.Exit(1 if live else 2) from None
    where = "scontrol" if live else str(file)
    screen.add({**r, WHERE: f"{where} job {r['scheduler_job']}"} for r in rows)
    return where


@app.command("node-holdings")
def node_holdings(
    spool: Path = typer.Option(..., "--spool", help="the directory the node agents write into "
                               "(`ingest agent pod-resources --spool DIR`; a volume shared with them)"),
    every: str | None = typer.Option(None, "--every", help="read it again every DURATION (e.g. 60s) until "
                                     "stopped (SIGTERM: exit 0, Ctrl-C: 130); default: once"),
    warehouse_file: WarehouseOpt = None,
    heartbeat: Path | None = typer.Option(None, "--heartbeat", help="touch this file after every read "
                                          "(a liveness probe checks its age: the loop still turns)"),
) -> None:
    """Bring the holdings the Kubernetes node agents left in the shared spool into the warehouse
    (one file per node: the agents never open the warehouse, which has one writer) and let them
    decide attribution (the incremental holdings pass of each cluster read, from its checkpoint).
    Re-reading changes nothing; unreadable files go to quarantine (source node-holdings)."""
    from gpuledger.ingest.holdings.node_spool import QUARANTINE_SOURCE, stream_node_spool
    from gpuledger.ingest.holdings.screening import Scratch, SpoolScreen
    from gpuledger.rules.clock import parse_duration_s
    from gpuledger.stopping import StopSignals

    if not spool.is_dir():
        console.print(f"--spool {spool}: not a directory (the node agents' --spool volume)", markup=False,
                      style="red")
        raise typer.Exit(2)
    interval = None
    if every is not None:
        try:
            interval = parse_duration_s(every)
        except ValueError as exc:
            raise typer.BadParameter(str(exc), param_hint="--every") from None
        if interval < 1:
            raise typer.BadParameter(f"{every!r} is under a second; give at least 1s", param_hint="--every")

    def once() -> None:
        now = utc_now()
        with Scratch() as scratch:
            screen = SpoolScreen(scratch, source=QUARANTINE_SOURCE, now=now)  # one record at a time, in batches
            files = stream_node_spool(spool, holdings=screen.add, bad=screen.refuse)
            landed = _land(screen, warehouse_file, now, incremental=True)  # the pipelines' holdings_links runs the same pass
        console.print(landed.line(f"{files} node files in {spool}", "node-holdings"), markup=False)

    with StopSignals() as stop:
        while True:
            with stop.holding():
                once()
            if heartbeat is not None:
                heartbeat.touch()
            if interval is None or stop.event.wait(interval):
                break
    if stop.stopped:
        raise typer.Exit(stop.exit_code)
