"""`gpuledger ingest slurm-gpus`: which GPUs Slurm jobs held, from the prolog spool or scontrol."""

from __future__ import annotations

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
    from gpuledger.ingest.holdings.checks import screen_holdings
    from gpuledger.ingest.holdings.store import (
        holdings_frame,
        link_holdings,
        partitioned_gpus,
        write_holdings,
    )

    given = sum((spool is not None, scontrol_live, scontrol_file is not None))
    if given != 1:
        console.print("[red]give exactly one of --spool DIR, --scontrol or --scontrol-file F[/red]")
        raise typer.Exit(2)
    if scontrol_json and not scontrol_live:
        console.print("[red]--json goes with --scontrol (a --scontrol-file is read in either form)[/red]")
        raise typer.Exit(2)
    now = utc_now()
    if spool is not None:
        rows, bad, origin = _spool_holdings(spool, cluster)
    else:
        rows, bad, origin = _scontrol_holdings(cluster, now, live=scontrol_live, as_json=scontrol_json,
                                               file=scontrol_file, tz=tz, scontrol=scontrol)
    with warehouse.open_writer(warehouse_path(warehouse_file)) as con:
        rows, refused = screen_holdings(rows, source="slurm-gpus", now=now,  # one record at a time
                                        partitioned=partitioned_gpus(con))
        bad = [*bad, *refused]
        frame = holdings_frame(rows)
        write_holdings(con, frame)
        if bad:
            warehouse.quarantine(con, bad)
        since = frame["first_seen"].min() if not frame.is_empty() else None
        result = link_holdings(con, since=since, now=now) if since is not None else None
    line = f"{frame.height} GPU holdings from {origin}"
    if result is not None:
        line += (f"; {result.linked} job x device intervals linked, {result.no_device} waiting for their "
                 f"device, {result.no_job} for their job record; {result.disagreements} label disagreements")
    if bad:
        line += f"; {len(bad)} files or records quarantined (`gpuledger warehouse quarantine --source slurm-gpus`)"
    console.print(line, markup=False)


def _spool_holdings(spool: Path, cluster: str | None) -> tuple[list, list, str]:
    """(holdings, quarantined files, where from) of the prolog/epilog spool; not a folder: exit 2."""
    from gpuledger.ingest.holdings.slurm_spool import read_spool

    if not spool.is_dir():
        console.print(f"[red]--spool {spool}: not a directory (the prolog's GPULEDGER_GPU_SPOOL)[/red]")
        raise typer.Exit(2)
    read = read_spool(spool, cluster=cluster)
    return read.holdings, read.quarantined, f"{read.files} spool files in {spool}"


def _scontrol_holdings(cluster: str | None, now: datetime, *, live: bool, as_json: bool, file: Path | None,
                       tz: str, scontrol: str) -> tuple[list, list, str]:
    """(holdings, [], where from) of `scontrol show job` run here (``live``) or saved in ``file``,
    text or JSON; scontrol failing is exit 1 live, 2 for a file."""
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
    return [{**r, WHERE: f"{where} job {r['scheduler_job']}"} for r in rows], [], where


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
    decide attribution (the incremental holdings pass of each cluster read, from its checkpoint). Re-reading changes nothing; unreadable files go to quarantine (source
    node-holdings)."""
    from gpuledger.ingest.holdings.checks import screen_holdings
    from gpuledger.ingest.holdings.node_spool import QUARANTINE_SOURCE, read_node_spool
    from gpuledger.ingest.holdings.store import (
        holdings_frame,
        holdings_pass,
        partitioned_gpus,
        write_holdings,
    )
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
        read = read_node_spool(spool)
        now = utc_now()
        with warehouse.open_writer(warehouse_path(warehouse_file)) as con:
            kept, refused = screen_holdings(read.holdings, source=QUARANTINE_SOURCE, now=now,  # one record at a time
                                            partitioned=partitioned_gpus(con))
            read.quarantined.extend(refused)
            frame = holdings_frame(kept)
            write_holdings(con, frame)
            if read.quarantined:
                warehouse.quarantine(con, read.quarantined)
            # the incremental pass of each cluster read (from its checkpoint: flat in history length;
            # the pipelines' holdings_links runs the same)
            passes = [holdings_pass(con, cluster=c, now=now).links for c in sorted(set(frame["cluster"]))]
        line = f"{frame.height} GPU holdings from {read.files} node files in {spool}"
        if passes:
            line += (f"; {sum(r.linked for r in passes)} job x device intervals linked, "
                     f"{sum(r.no_device for r in passes)} waiting for their device, "
                     f"{sum(r.no_job for r in passes)} for their job record; "
                     f"{sum(r.disagreements for r in passes)} label disagreements")
        if read.quarantined:
            line += (f"; {len(read.quarantined)} files or records quarantined "
                     "(`gpuledger warehouse quarantine --source node-holdings`)")
        console.print(line, markup=False)

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
