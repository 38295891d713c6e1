"""`gpuledger report ...`: usage, utilization, chargeback, fairshare, balance, budget, squatters (here) and
the finance files, statement and weekly (gpuledger/cli/report/files.py).

Tables print to the terminal (gpuledger/cli/views/tables.py: the default columns fit 80 columns, `--wide` shows
all, `--columns a,b` picks); `--format csv|parquet|json --out FILE` writes them for other tools.
Times are UTC; "now" defaults to the newest data in the warehouse (see facts.data_now).
"""

from __future__ import annotations

from datetime import datetime, timedelta
from pathlib import Path

import typer

from gpuledger import warehouse
from gpuledger.cli.options import (
    ConfigOpt,
    Format,
    FormatOpt,
    LazyConsole,
    OutOpt,
    WarehouseOpt,
    check_range,
    read_config,
    utc_option,
    utc_range,
    warehouse_config,
    warehouse_path,
)
from gpuledger.cli.report import files
from gpuledger.cli.views import reports, tables
from gpuledger.cli.views.show import show_frame
from gpuledger.lazy import lazy_import

# the read model: the materialized answer when it is fresh for the time asked, else computed
facts = lazy_import("gpuledger.facts")

app = typer.Typer(help="Reports: usage, utilization, chargeback, fair share, budgets, squatters; finance "
                       "statement and weekly files.", no_args_is_help=True)
console = LazyConsole()  # tables print through gpuledger/cli/views/tables.py; this is for lines beside them


WideOpt = tables.WideOpt
ColumnsOpt = tables.ColumnsOpt
NowOpt = typer.Option(None, "--now", help="evaluate as of this UTC time (default: the newest data)")


def _time(text: str | None, option: str = "--now") -> datetime | None:
    return utc_option(text, option)


def _one_of(*choices: str):
    """An option callback: a usage error naming the option and its choices for anything else."""

    def check(ctx: typer.Context, param: typer.CallbackParam, value: str) -> str:
        if value not in choices:
            raise typer.BadParameter(f"{value!r}: choose {', '.join(choices)}")
        return value

    return check


def _open(warehouse_file: Path | None):
    return warehouse.open_reader(warehouse_path(warehouse_file))


def _say_if_computed(answer, what: str) -> None:
    """One line on stderr, after the table, when ``answer`` was computed from the raw data: no
    materialized rows answer ``what`` (not materialized yet, or not fresh for it), so it took the
    slow path (issue 41: the user knows why they waited, and what keeps the answer fast). After the
    table, so that a mistake in an output option stays a one-line error."""
    if answer.source == facts.COMPUTED:
        typer.echo(f"note: {what} computed from the raw data: the read model has no fresh rows for it "
                   "(the pipelines keep them current: `gpuledger pipelines run-once`, or the Dagster schedules)",
                   err=True)


@app.command("chargeback")
def chargeback(
    period: str = typer.Option(..., "--period", "-p", help="YYYY-MM, YYYY-MM-DD, YYYY-Www or START..END"),
    level: str = typer.Option("project", callback=_one_of("job", "project", "node"),
                              help="job, project or node (every org tree node)"),
    fmt: Format = FormatOpt, out: Path | None = OutOpt, now: str | None = NowOpt,
    wide: bool = WideOpt, columns: str | None = ColumnsOpt,
    warehouse_file: WarehouseOpt = None, config: ConfigOpt = None,
) -> None:
    """Chargeback lines: allocated GPU-hours × price (model, tier, as of each hour), exact to the
    cent, idle capacity on its own line or spread (config policy.chargeback.idle_cost)."""
    from gpuledger.analytics.chargeback import period_bounds, statement_notes
    from gpuledger.ledger.periods import state_notes, statement_lines

    try:
        period_bounds(period)
    except ValueError as exc:
        raise typer.BadParameter(str(exc), param_hint="--period") from None
    with _open(warehouse_file) as con:
        cfg = warehouse_config(con, config, write=False)  # the warehouse's config, not the folder's
        # A closed month reads its issued lines and corrections (gpuledger.ledger.periods).
        lines = statement_lines(con, period, level=level, policy=cfg.policy, now=_time(now))
        if level == "node":  # each parent above its children, as `report budget` lists the tree
            lines = facts.in_tree_order(con, lines)
        notes, warnings = statement_notes(lines)
        notes = state_notes(con, period, lines, notes)  # closed / provisional / corrected, as the files say
    show_frame(lines, fmt, out, f"chargeback {period} by {level} (UTC)", reports.CHARGEBACK, wide, columns)
    for note in notes:  # beside the table; on stderr when stdout carries csv / json
        console.print(note) if fmt is Format.table else typer.echo(note, err=True)
    for warning in warnings:
        typer.echo(f"warning: {warning}", err=True)


@app.command("usage")
def usage(
    start: str = typer.Option(..., help="UTC start (ISO-8601 or epoch s)"),
    end: str = typer.Option(..., help="UTC end, exclusive"),
    by: str = typer.Option("project", callback=_one_of("job", "user", "project", "node"),
                           help="job, user, project or node"),
    fmt: Format = FormatOpt, out: Path | None = OutOpt, wide: bool = WideOpt, columns: str | None = ColumnsOpt,
    warehouse_file: WarehouseOpt = None,
) -> None:
    """Allocated, active, idle and unknown GPU-hours, efficiency and energy (kWh)."""
    lo, hi = utc_range(start, end)
    with _open(warehouse_file) as con:
        answer = facts.usage(con, start=lo, end=hi, by=by)  # materialized when fresh
    show_frame(answer.table, fmt, out, f"GPU usage by {by}, {start} .. {end} UTC", reports.USAGE, wide, columns)
    _say_if_computed(answer, f"usage by {by}")


@app.command("utilization")
def utilization(
    start: str | None = typer.Option(None, help="UTC start (default: 24 h before --end)"),
    end: str | None = typer.Option(None, help="UTC end, exclusive (default: the hour of the newest data)"),
    by: str = typer.Option("model", callback=_one_of("model", "cluster", "fleet", "kind"),
                           help="model, cluster, fleet (per hour) or kind (workload kinds)"),
    fmt: Format = FormatOpt, out: Path | None = OutOpt, wide: bool = WideOpt, columns: str | None = ColumnsOpt,
    warehouse_file: WarehouseOpt = None,
) -> None:
    """Allocation % and active % of GPU capacity by hour, MIG slices included."""
    lo, hi = utc_range(start, end)
    with _open(warehouse_file) as con:
        # Default: the last 24 whole hours before the newest data.
        hi = hi or facts.data_now(con).replace(minute=0, second=0, microsecond=0)
        lo = lo or hi - timedelta(days=1)
        check_range(lo, hi)  # a --start after the newest data, with no --end
        answer = facts.utilization(con, start=lo, end=hi, by=by)  # materialized when fresh (by model, cluster, fleet)
    show_frame(answer.table, fmt, out, f"utilization by {by}, {lo} .. {hi} UTC", reports.UTILIZATION, wide,
               columns)
    _say_if_computed(answer, f"utilization by {by}")


@app.command("fairshare")
def fairshare(
    fmt: Format = FormatOpt, out: Path | None = OutOpt, now: str | None = NowOpt,
    wide: bool = WideOpt, columns: str | None = ColumnsOpt,
    warehouse_file: WarehouseOpt = None, config: ConfigOpt = None,
) -> None:
    """Hierarchical fair share like `sshare -l`: shares, usage, level FS, rank and factor, plus the
    delivery ratio (delivered ÷ owed GPU-hours) and occupancy over the usage window."""
    with _open(warehouse_file) as con:
        cfg = read_config(con, config)  # the warehouse's config, validated when the answer is computed
        answer = facts.fairshare(con, policy=lambda: cfg.policy, as_of=_time(now))  # materialized when fresh
        mode = cfg.setting("policy.usage.mode")
    show_frame(answer.table, fmt, out, f"fair share ({mode} usage, GPU-hours)", reports.FAIRSHARE, wide, columns)
    _say_if_computed(answer, "fair share")


@app.command("balance")
def balance(
    fmt: Format = FormatOpt, out: Path | None = OutOpt, now: str | None = NowOpt,
    history: bool = typer.Option(False, "--history", help="every settlement period, oldest first (default: "
                                 "the running one, its carried-in balance and what it owes so far)"),
    node: str | None = typer.Option(None, "--node", help="one org node (project or program) only"),
    wide: bool = WideOpt, columns: str | None = ColumnsOpt,
    warehouse_file: WarehouseOpt = None, config: ConfigOpt = None,
) -> None:
    """The delivery balance: GPU-hours owed but not delivered, carried into the next settlement period
    (the usage window), and what each node got above what it was due (burst)."""
    with _open(warehouse_file) as con:
        cfg = read_config(con, config)
        frame = facts.delivery_balance(con, policy=lambda: cfg.policy, as_of=_time(now)).frame
    if node is not None:
        if node not in set(frame["node"]):
            raise typer.BadParameter(f"{node!r} is not in the org tree: choose one of "
                                     f"{', '.join(sorted(set(frame['node'])))}", param_hint="--node")
        frame = frame.filter(frame["node"] == node)
    if not history and frame.height:
        frame = frame.filter(frame["period_start"] == frame["period_start"].max())
    days = cfg.policy.usage.window_days
    credit = "credited in fair share" if cfg.policy.usage.delivery_balance.credit_fair_share else "not credited in fair share"
    show_frame(frame, fmt, out, f"delivery balance per {days:g}-day settlement period (GPU-hours, UTC; {credit})",
               reports.BALANCE, wide, columns)


@app.command("budget")
def budget(
    fmt: Format = FormatOpt, out: Path | None = OutOpt, now: str | None = NowOpt,
    jobs: bool = typer.Option(False, "--jobs", help="per running job: funded or not, protected until"),
    wide: bool = WideOpt, columns: str | None = ColumnsOpt,
    warehouse_file: WarehouseOpt = None, config: ConfigOpt = None,
) -> None:
    """Budget burn per org node: consumed, remaining, 7-day burn rate, projected exhaustion, status
    (normalised GPU-hours)."""
    with _open(warehouse_file) as con:
        cfg = read_config(con, config)  # the warehouse's config, validated when the answer is computed
        if jobs:
            frame = facts.funding(con, policy=cfg.policy, now=_time(now)).frame
        else:
            answer = facts.budget(con, policy=lambda: cfg.policy, as_of=_time(now))  # materialized when fresh
    if jobs:
        show_frame(frame, fmt, out, "job funding (UTC)", reports.FUNDING, wide, columns)
    else:
        show_frame(facts.with_outlook(answer.table, as_of=answer.as_of), fmt, out,
                   f"budget burn as of {answer.as_of:%Y-%m-%d %H:%M} (normalised GPU-hours, UTC)", reports.BUDGET,
                   wide, columns)
        _say_if_computed(answer, "budget burn")


@app.command("squatters")
def squatters(
    fmt: Format = FormatOpt, out: Path | None = OutOpt, now: str | None = NowOpt,
    include_exempt: bool = typer.Option(False, help="also list exempt jobs (marked)"),
    wide: bool = WideOpt, columns: str | None = ColumnsOpt,
    warehouse_file: WarehouseOpt = None, config: ConfigOpt = None,
) -> None:
    """Jobs sitting on idle GPUs right now: idle GPUs, idle since, wasted GPU-hours and cost,
    memory held, severity (warning / second-warning / preempt-eligible)."""
    with _open(warehouse_file) as con:
        cfg = read_config(con, config)  # the warehouse's config, validated when the answer is computed
        # the squatting pipeline's latest evaluation when it is recent for --now, else computed
        found = facts.findings(con, policy=lambda: cfg.policy, now=_time(now), include_exempt=include_exempt)
        frame = facts.squatters_table(found)
    show_frame(frame, fmt, out, "idle GPU findings (UTC)", reports.SQUATTERS, wide, columns)
    _say_if_computed(found, "idle GPU findings")

@app.command("waits")
def waits(
    period: str | None = typer.Option(None, "--period", "-p",
                                      help="jobs submitted in YYYY-MM, YYYY-MM-DD, YYYY-Www or START..END"),
    since: str | None = typer.Option(None, "--since", help="jobs submitted from this UTC time to now "
                                                           "(default: the 7 days before now)"),
    by: str = typer.Option("project", callback=_one_of("project", "user", "class", "job"),
                           help="project, user, class (debug / interactive / batch / training / inference / "
                                "other) or job (every waiting period)"),
    every: str | None = typer.Option(None, "--every", callback=lambda v: v if v is None else _one_of("day", "week")(
        None, None, v), help="day or week: one row per bucket of submission time (weeks start Monday, UTC)"),
    cause: bool = typer.Option(False, "--cause", help="show the causes column (each wait's main cause, counted)"),
    project: list[str] = typer.Option([], "--project", help="only this project's jobs (repeat)"),
    fmt: Format = FormatOpt, out: Path | None = OutOpt, now: str | None = NowOpt,
    wide: bool = WideOpt, columns: str | None = ColumnsOpt, warehouse_file: WarehouseOpt = None,
) -> None:
    """Wait times from job records (submit → start, seconds): p50 / p90 / max wait and time to first
    GPU per project, user or job class, and each wait's main cause (pool full, fair-share rank,
    budget, squatters, the scheduler's own reason). Jobs still waiting count with their wait so far."""
    from gpuledger.rules.periods import PeriodError, period_bounds

    if period is not None and since is not None:
        raise typer.BadParameter("give --period or --since, not both", param_hint="--since")
    with _open(warehouse_file) as con:
        at = _time(now) or facts.waits_now(con)
        if period is not None:
            try:
                lo, hi = period_bounds(period)
            except PeriodError as exc:
                raise typer.BadParameter(str(exc), param_hint="--period") from None
        else:
            lo, hi = (_time(since, "--since") or at - timedelta(days=7)), at + timedelta(microseconds=1)
            check_range(lo, hi)
        frame = facts.waits(con, start=lo, end=hi, now=at, by=by, every=every, projects=tuple(project)).table
    what = "per job" if by == "job" else f"by {by}" + (f", per {every}" if every else "")
    title = f"wait times {what}, jobs submitted {lo:%Y-%m-%d %H:%M} .. {min(hi, at):%Y-%m-%d %H:%M} UTC (as of {at:%Y-%m-%d %H:%M})"
    show_frame(frame, fmt, out, title, reports.waits_view(by_job=by == "job", causes=cause), wide, columns)


app.command("statement")(files.statement)
app.command("weekly")(files.weekly)
