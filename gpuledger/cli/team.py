"""`gpuledger team show | order | fund | unfund | hold | release`: a team lead manages their own
team's queue (issue 38) — the order of its queued jobs, which of them its budget funds, holds.

Who acts: ``--as EMAIL`` (or ``$GPULEDGER_LEAD``) names the lead; it must be listed under
``dashboards.leads`` in the config in force, and acts only for the org nodes listed there. The CLI
cannot verify an e-mail the way the dashboards' OIDC sign-in does: whoever may write the warehouse
file may run it, so the audit records the named lead together with the OS user who ran the command.
Each change is audited (who, how identified, when, before -> after) and reaches the scheduler
through enforcement's next plan -> apply (dry run unless `enforce apply --yes` and
``policy.enforcement.dry_run: false``; the kill switch stops it; each action applied once)."""

from __future__ import annotations

import getpass
from datetime import datetime

import typer

from gpuledger import warehouse
from gpuledger.cli.options import ConfigOpt, WarehouseOpt, utc_option, warehouse_config, warehouse_path
from gpuledger.errors import UsageError
from gpuledger.rules.clock import utc_now

app = typer.Typer(help="A team lead's own queue: order, fund, hold or release the team's queued jobs "
                       "(applied by enforcement's next plan -> apply).", no_args_is_help=True)

AsOpt = typer.Option(..., "--as", envvar="GPULEDGER_LEAD",
                     help="the acting lead's e-mail, as listed under dashboards.leads in the config (env "
                          "GPULEDGER_LEAD); the audit records it with the OS user running the command")
TeamOpt = typer.Option(None, "--team", help="the org node to act for (default: the lead's only one)")
NowOpt = typer.Option(None, "--now", help="which jobs are queued as of this UTC time, or `data` for the newest data "
                                          "(default: the wall clock)")


def _now(con, text: str | None, wall: datetime) -> datetime:
    if text == "data":
        from gpuledger import facts

        return facts.data_now(con)
    return utc_option(text, "--now") or wall


def _team(con, cfg, lead: str, node: str | None):
    from gpuledger.dashboards import access
    from gpuledger.enforce.team_store import Team

    parent_of = dict(con.execute("SELECT node, parent FROM org_nodes").fetchall())
    viewer = access.viewer_for(lead, cfg.dashboards, parent_of)
    try:
        node, projects = access.team_of(viewer, parent_of, node)
    except ValueError as exc:
        raise UsageError(f"--as {lead}: {exc}") from None
    return Team(node=node, projects=projects, lead=lead, identity=f"cli (OS user {getpass.getuser()})")


def _change(lead: str, node: str | None, now_text: str | None, warehouse_file, config, do) -> None:
    """Open the warehouse for writing, resolve the lead's team, run ``do(con, team, cfg, now, at)``
    (a list of (job, before, after)), print each change and what carries it to the scheduler."""
    path = warehouse_path(warehouse_file)
    at = utc_now()
    with warehouse.open_writer(path) as con:
        cfg = warehouse_config(con, config, write=False)
        team = _team(con, cfg, lead, node)
        now = _now(con, now_text, at)
        changes = do(con, team, cfg, now, at)
    if not changes:
        typer.echo(f"team {team.node}: nothing changed")
        return
    for job, before, after in changes:
        typer.echo(f"team {team.node}: job {job}: {before} -> {after} (by {lead}, audited)")
    typer.echo("enforcement's next cycle carries it to the scheduler (`gpuledger enforce plan` shows it; "
               "`gpuledger enforce apply --backend slurm|kueue` applies it, a dry run unless --yes)")


@app.command("order")
def order(
    jobs: list[str] = typer.Argument(..., help="the team's queued jobs, first served first (JOB or CLUSTER/JOB)"),
    lead: str = AsOpt, node: str | None = TeamOpt, now: str | None = NowOpt,
    warehouse_file: WarehouseOpt = None, config: ConfigOpt = None,
) -> None:
    """Order the team's queued jobs. Only the team's own priorities are swapped, band by band
    (funded, unfunded): no other team's job moves. Jobs not named leave the lead's order."""
    from gpuledger.enforce import team_store

    _change(lead, node, now, warehouse_file, config,
            lambda con, team, cfg, at_now, at: team_store.set_order(con, team, jobs, now=at_now, at=at))


@app.command("fund")
def fund(
    job: str = typer.Argument(..., help="a queued job of the team (JOB or CLUSTER/JOB)"),
    hours: float = typer.Option(..., "--hours", help="its minimum runtime funded by the team's budget (h; at most "
                                                     "policy.funding.min_runtime_cap_hours)"),
    lead: str = AsOpt, node: str | None = TeamOpt, now: str | None = NowOpt,
    warehouse_file: WarehouseOpt = None, config: ConfigOpt = None,
) -> None:
    """Fund a queued job from the team's budget: GPUs x hours x the model's budget weight must fit
    in what the budget has left after the team's other funded jobs."""
    from gpuledger.enforce import team_store

    _change(lead, node, now, warehouse_file, config,
            lambda con, team, cfg, at_now, at: [team_store.set_funding(con, team, job, hours, now=at_now, at=at,
                                                                       cfg=cfg)])


@app.command("unfund")
def unfund(job: str = typer.Argument(..., help="a queued job of the team"), lead: str = AsOpt,
           node: str | None = TeamOpt, now: str | None = NowOpt,
           warehouse_file: WarehouseOpt = None, config: ConfigOpt = None) -> None:
    """Stop funding a queued job from the team's budget (what it committed is free again)."""
    from gpuledger.enforce import team_store

    _change(lead, node, now, warehouse_file, config,
            lambda con, team, cfg, at_now, at: [team_store.set_funding(con, team, job, None, now=at_now, at=at,
                                                                       cfg=cfg)])


@app.command("hold")
def hold(job: str = typer.Argument(..., help="a queued job of the team"), lead: str = AsOpt,
         node: str | None = TeamOpt, now: str | None = NowOpt,
         warehouse_file: WarehouseOpt = None, config: ConfigOpt = None) -> None:
    """Hold a queued job: it does not start until released (Slurm: scontrol hold; Kueue: inactive)."""
    from gpuledger.enforce import team_store

    _change(lead, node, now, warehouse_file, config,
            lambda con, team, cfg, at_now, at: [team_store.set_hold(con, team, job, True, now=at_now, at=at)])


@app.command("release")
def release(job: str = typer.Argument(..., help="a held job of the team"), lead: str = AsOpt,
            node: str | None = TeamOpt, now: str | None = NowOpt,
            warehouse_file: WarehouseOpt = None, config: ConfigOpt = None) -> None:
    """Release a job the lead held: it queues again in the team's order."""
    from gpuledger.enforce import team_store

    _change(lead, node, now, warehouse_file, config,
            lambda con, team, cfg, at_now, at: [team_store.set_hold(con, team, job, False, now=at_now, at=at)])


@app.command("show")
def show(lead: str = AsOpt, node: str | None = TeamOpt, now: str | None = NowOpt,
         warehouse_file: WarehouseOpt = None, config: ConfigOpt = None) -> None:
    """The team's running and queued jobs with the lead's order, funding marks and holds, the
    budget left, and the last changes (the audit)."""
    from gpuledger.enforce import team_store

    path = warehouse_path(warehouse_file)
    with warehouse.open_writer(path):  # the schema up to date (readers never change the file)
        pass
    with warehouse.open_reader(path) as con:
        cfg = warehouse_config(con, config, write=False)
        team = _team(con, cfg, lead, node)
        at = _now(con, now, utc_now())
        rows = team_store.queue(con, team.projects, at)
        audit = con.execute("SELECT changed_at, changed_by, identity, change, cluster, job_id, before, after "
                            "FROM team_audit WHERE node = ? ORDER BY changed_at DESC LIMIT 10", [team.node]).fetchall()
    _print_queue(team, rows, at, audit)


def _print_queue(team, rows: list[dict], at: datetime, audit: list) -> None:
    typer.echo(f"team {team.node} (projects {', '.join(sorted(team.projects))}) as of {at:%Y-%m-%d %H:%M} UTC")
    for title, queued in (("queued (the lead's order first)", True), ("running", False)):
        part = [r for r in rows if r["queued"] == queued]
        typer.echo(f"{title}: {len(part)} job(s)")
        for r in part:
            marks = [f"#{r['position']}" if r["position"] is not None else "-"]
            if r["fund_hours"] is not None:
                marks.append(f"funded {r['fund_hours']:g} h ({r['fund_gpu_hours']:,.2f} norm. GPU-h)")
            if r["held"]:
                marks.append("held")
            typer.echo(f"  {r['cluster']}/{r['job_id']:<14} {r['name'] or '':<20} {r['project']:<14} "
                       f"{r['user_name'] or '':<10} {r['gpus']:g} GPU(s)  {'  '.join(marks)}")
    if audit:
        typer.echo("last changes (UTC):")
    for changed_at, by, identity, change, cluster, job_id, before, after in audit:
        typer.echo(f"  {changed_at:%Y-%m-%d %H:%M:%S} {by} [{identity}] {change} {cluster}/{job_id}: {before} -> {after}")

