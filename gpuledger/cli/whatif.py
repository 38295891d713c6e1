"""`gpuledger whatif schedule | procurement`: replay the warehouse's job records under policies and
capacity mixes (gpuledger.whatif). Light on purpose (loaded for --help): polars, DuckDB and the
simulator load inside the commands."""

from __future__ import annotations

import math
from datetime import datetime, timedelta
from pathlib import Path

import typer

from gpuledger import warehouse
from gpuledger.cli.options import (
    ConfigOpt,
    Format,
    OutOpt,
    RegimeOpt,
    WarehouseOpt,
    check_range,
    out_file,
    utc_option,
    warehouse_config,
    warehouse_path,
)
from gpuledger.cli.views.show import show_frame
from gpuledger.errors import UsageError
from gpuledger.simulator.defaults import REGIME_NAMES

app = typer.Typer(
    help="What-if: replay job records under scheduling policies and capacity mixes.", no_args_is_help=True
)

POLICY_NAMES = ("priority", "slot-limits", "fair-share", "reclaim", "quick-lane")  # gpuledger.whatif.model.ALL_POLICIES
DEFAULT_DAYS = 30


StartOpt = typer.Option(
    None, "--start", help="replay from (UTC; default: 30 days before --end, not before the first job)"
)
EndOpt = typer.Option(
    None, "--end", help="replay until (UTC, exclusive; default: the hour after the newest job event)"
)
InventoryOpt = typer.Option(
    None,
    "--inventory",
    help="a YAML or CSV inventory (rows of cluster, model, count, "
    "mig_profile, tier) instead of the warehouse's GPUs",
)
def _json_removed(value):
    if value is not None:
        raise typer.BadParameter("was removed (deprecated the release before): use --format json --out PATH",
                                 param_hint="--json")


JsonOpt = typer.Option(None, "--json", hidden=True, callback=_json_removed)  # removed: says what replaced it
WhatifFormatOpt = typer.Option(
    Format.table, "--format", "-f",
    help="table (terminal), json (every result; the dashboard's /what-if page reads it), or csv / "
         "parquet of the main table",
)


def _emit(doc: str, frame, fmt: Format, out: Path | None, title: str, view) -> bool:
    """Write the results as asked; True when that was all (no terminal tables to print)."""
    if fmt is Format.json:
        if out:
            out.write_text(doc, encoding="utf-8")
            typer.echo(f"wrote {out}", err=True)
        else:
            typer.echo(doc, nl=False)
        return True
    if fmt is not Format.table:
        show_frame(frame, fmt, out, title, view)
        return True
    return False


def _check_out(fmt: Format, out: Path | None) -> None:
    """Before any work: the terminal tables are several, so --out takes a machine format."""
    if out and fmt is Format.table:
        raise typer.BadParameter("the what-if tables print to the terminal; --out takes --format json, csv "
                                 "or parquet", param_hint="--out")
SimDirOpt = typer.Option(None, "--sim-dir", help="with --simulate-gpus: where the simulated warehouses are kept "
                                               "[default: data/whatif-seeds]")
ProgressOpt = typer.Option(True, "--progress/--no-progress", help="a progress bar on stderr")


def _range(con, start_text, end_text) -> tuple[datetime, datetime]:
    lo, hi = utc_option(start_text, "--start"), utc_option(end_text, "--end")
    check_range(lo, hi)
    first, last = con.execute(
        "SELECT min(coalesce(submit_time, start_time)), "
        "max(greatest(coalesce(end_time, start_time, submit_time), "
        "coalesce(start_time, submit_time), submit_time)) FROM jobs"
    ).fetchone()
    if first is None and (lo is None or hi is None):
        raise UsageError(
            "the warehouse has no job records to replay (import or simulate some, or give --start and --end)"
        )
    if hi is None:
        hi = last.replace(minute=0, second=0, microsecond=0) + timedelta(hours=1)
    if lo is None:
        lo = max(hi - timedelta(days=DEFAULT_DAYS), first.replace(minute=0, second=0, microsecond=0))
    check_range(lo, hi)
    if first is not None and (lo > last or hi <= first):  # replaying no job as if jobs had run
        raise UsageError(f"--start {lo:%Y-%m-%dT%H:%M}Z .. --end {hi:%Y-%m-%dT%H:%M}Z holds none of the warehouse's "
                         f"job records ({first:%Y-%m-%dT%H:%M}Z .. {last:%Y-%m-%dT%H:%M}Z); choose a window that "
                         "overlaps them")
    return lo, hi


def _pairs(values: list[str] | None, option: str, cast=float) -> dict:
    out = {}
    for text in values or []:
        name, sep, value = text.partition("=")
        if not sep or not name:
            raise typer.BadParameter(f"{text!r}: write NAME=VALUE", param_hint=option)
        try:
            out[name] = cast(value)
        except ValueError:
            what = "a whole number" if cast is int else "a number"
            raise typer.BadParameter(f"{text!r}: {value!r} is not {what}", param_hint=option) from None
        if not math.isfinite(float(out[name])) or out[name] < 0:  # -5 reserved GPUs, nan shares: nothing meant
            raise typer.BadParameter(f"{text!r}: {value!r} is not a finite number of 0 or more", param_hint=option)
    return out


def _params(cfg, *, seed, checkpoint, cycle=None, usage_mode=None, window=None, half_life=None, cap=None,
            idle=None, shares=None, balance=None, lane_reserve=None, budgets="config", spare=None,
            own=None):
    from gpuledger.whatif.model import Params

    w = cfg.policy.whatif
    if usage_mode is not None and usage_mode not in ("decay", "window"):
        raise typer.BadParameter(f"{usage_mode!r}: choose decay or window", param_hint="--usage-mode")
    return Params(
        usage_mode=usage_mode,
        window_days=window,
        half_life_days=half_life,
        min_runtime_cap_hours=cap,
        idle_threshold_ratio=idle,
        cycle_minutes=cycle if cycle is not None else w.cycle_minutes,
        checkpoint_interval_minutes=checkpoint if checkpoint is not None else w.checkpoint_interval_minutes,
        resumable_kinds=tuple(w.resumable_kinds),
        share_overrides=tuple(sorted(_pairs(shares, "--share").items())),
        delivery_balance=None if balance is None else float(balance),
        lane_reserve_share=lane_reserve,
        spare_behind_owed=spare,
        spare_own_project=own,
        budgets=budgets,
        seed=seed,
    )


def _load(path, config, start, end, inventory, **params):
    """(config, params, trace, start, end) of a what-if run: the warehouse's stored config, the range
    (defaults filled in from the data), the jobs."""
    from gpuledger.whatif.trace import inventory_from_file, load_trace

    inv = inventory_from_file(inventory) if inventory else None
    with warehouse.open_reader(warehouse_path(path)) as con:
        cfg = warehouse_config(con, config, write=False)
        lo, hi = _range(con, start, end)
        chosen = _params(cfg, **params)
        return cfg, chosen, load_trace(con, cfg, start=lo, end=hi, params=chosen, inventory=inv), lo, hi


def _sweep_values(text: str) -> tuple[str, list]:
    name, sep, rest = text.partition("=")
    if not sep or not rest:
        raise typer.BadParameter(
            f"{text!r}: write PARAMETER=V1,V2,... (shares: shares=node:70/node2:30,node:50/node2:50)",
            param_hint="--sweep",
        )
    if name == "shares":
        values = []
        for group in rest.split(","):
            pairs = []
            for item in group.split("/"):
                node, _, v = item.partition(":")
                try:
                    pairs.append((node, float(v)))
                except ValueError:
                    raise typer.BadParameter(f"{item!r}: write node:shares", param_hint="--sweep") from None
            values.append(tuple(sorted(pairs)))
        return name, values
    try:
        return name, [float(v) for v in rest.split(",")]
    except ValueError:
        raise typer.BadParameter(f"{rest!r}: values must be numbers", param_hint="--sweep") from None


class _Bar:
    """A rich progress bar, one task per run, on stderr."""

    def __init__(self, enabled: bool):
        self.enabled = enabled
        self.tasks = {}

    def __enter__(self):
        if self.enabled:
            from rich.console import Console
            from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

            self.progress = Progress(
                TextColumn("{task.description}"),
                BarColumn(),
                TextColumn("{task.percentage:>3.0f}%"),
                TimeElapsedColumn(),
                console=Console(stderr=True),
                transient=False,
            )
            self.progress.__enter__()
        return self

    def __exit__(self, *exc):
        if self.enabled:
            if exc[0] is not None:  # Ctrl-C or an error: no half-drawn bar above its one line
                self.progress.live.transient = True
            self.progress.__exit__(*exc)

    def __call__(self, name: str, fraction: float) -> None:
        if not self.enabled:
            return
        if name not in self.tasks:
            self.tasks[name] = self.progress.add_task(f"simulate {name}", total=1.0)
        self.progress.update(self.tasks[name], completed=fraction)


@app.command("schedule")
def schedule(
    start: str | None = StartOpt,
    end: str | None = EndOpt,
    policies: str = typer.Option(
        ",".join(POLICY_NAMES),
        "--policies",
        help="comma-separated: priority (1: declared priority, no preemption), slot-limits (each team "
        "capped at its share of the GPUs, Ai2's old caps), fair-share (2: budgets + hierarchical fair share "
        "through enforce), reclaim (3: 2 + squatter reclaim)",
    ),
    inventory: Path | None = InventoryOpt,
    checkpoint_minutes: float | None = typer.Option(
        None,
        "--checkpoint-minutes",
        min=1,
        help="checkpoint interval of jobs that resume (default policy.whatif)",
    ),
    cycle_minutes: float | None = typer.Option(
        None, "--cycle-minutes", min=1, help="enforcement cycle (default policy.whatif)"
    ),
    usage_mode: str | None = typer.Option(
        None, "--usage-mode", help="decay or window (default policy.usage)"
    ),
    window_days: float | None = typer.Option(None, "--window-days", min=0.01, help="usage window, days"),
    half_life_days: float | None = typer.Option(
        None, "--half-life-days", min=0.01, help="usage half-life, days"
    ),
    min_runtime_cap_hours: float | None = typer.Option(
        None, "--min-runtime-cap-hours", min=0, help="minimum-runtime cap, hours"
    ),
    idle_threshold: float | None = typer.Option(
        None, "--idle-threshold", min=0, max=1, help="idle threshold, ratio"
    ),
    share: list[str] | None = typer.Option(None, "--share", help="NODE=SHARES: a what-if split (repeatable)"),
    delivery_balance: bool | None = typer.Option(
        None, "--delivery-balance/--no-delivery-balance",
        help="rank fair share on usage less the delivery balance still owed, or not (default "
             "policy.usage.delivery_balance.credit_fair_share)"),
    lane_reserve: float | None = typer.Option(
        None, "--lane-reserve", min=0, max=0.49,
        help="policy 4: share of each pool held for the quick lane and lent meanwhile (default "
             "policy.enforcement.quick_lane.reserve_share)"),
    spare_behind_owed: bool | None = typer.Option(
        None, "--spare-behind-owed/--no-spare-behind-owed",
        help="demand preemption spares running jobs that cannot checkpoint of projects behind what they are "
             "owed this settlement period, or not (default policy.enforcement.spare_behind_owed)"),
    spare_own_project: bool | None = typer.Option(
        None, "--spare-own-project/--no-spare-own-project",
        help="demand preemption never takes a running job of the waiting job's own project, or may "
             "(default policy.enforcement.spare_own_project)"),
    budgets: str | None = typer.Option(
        None, "--budgets",
        help="config: fund the config's budgets as written; fit: scale each period's budgets, in proportion, "
             "to the replayed cluster (they sum to its capacity at its dearest model's budget weight: each "
             "team's share funded on any model) — a config written for another cluster size funds a simulated "
             "one too little or too much [default: fit with --simulate-gpus, else config]"),
    sweep: str | None = typer.Option(
        None,
        "--sweep",
        help="PARAMETER=V1,V2,...: one run per value, a table of the "
        "figures (window_days, half_life_days, min_runtime_cap_hours, "
        "idle_threshold_ratio, checkpoint_interval_minutes, cycle_minutes, delivery_balance (0 or 1), "
        "lane_reserve_share, shares)",
    ),
    sweep_policy: str = typer.Option("reclaim", "--sweep-policy", help="the policy a sweep runs"),
    seed: int = typer.Option(1, "--seed", min=0, max=2**32 - 1,
                             help="trace seed: the draws of never-started jobs' work (the first of --seeds)"),
    seeds: int | None = typer.Option(
        None, "--seeds", min=1, max=100,
        help="N seeds (--seed, --seed + 1, ...): each its own trace, every policy replayed on each; the outcome "
             "table shows min, median and max. Each seed's draws of the warehouse's never-started jobs, or with "
             "--simulate-gpus each seed a simulated warehouse",
    ),
    simulate_gpus: int | None = typer.Option(
        None, "--simulate-gpus", min=8,
        help="replay simulated warehouses of this many GPUs instead of --warehouse (one per seed, --days long "
             "from --sim-start; built once into --sim-dir)",
    ),
    days: float = typer.Option(30.0, "--days", min=0.5, help="with --simulate-gpus: days simulated"),
    sim_start: str = typer.Option("2026-11-01", "--sim-start", help="with --simulate-gpus: the month's start, UTC"),
    sim_dir: Path | None = SimDirOpt,
    regime: str | None = RegimeOpt,
    fmt: Format = WhatifFormatOpt,
    out: Path | None = OutOpt,
    _json: Path | None = JsonOpt,
    chart: Path | None = typer.Option(
        None,
        "--chart",
        callback=lambda v: out_file(v, "--chart"),
        help="with --sweep: an SVG chart of it here",
    ),
    progress: bool = ProgressOpt,
    path: WarehouseOpt = None,
    config: ConfigOpt = None,
) -> None:
    """Replay the warehouse's jobs on its GPUs (or --inventory) under the baselines and policies 1/2/3, side
    by side: delivered ÷ owed per project, occupancy, useful GPU-hours, waits, preemptions, squatting, and
    the outcome table (Ai2's measures; over --seeds, min, median and max)."""
    from gpuledger.whatif import compare

    _check_out(fmt, out)
    chosen = _chosen_policies(policies, sweep_policy)
    from gpuledger.whatif.model import BUDGET_MODES, BUDGETS_SAY

    if budgets is None:  # a cluster simulated for the replay is budgeted as Ai2 budgets: the capacity it has
        budgets = "fit" if simulate_gpus else "config"
    if budgets not in BUDGET_MODES:
        raise typer.BadParameter(f"{budgets!r}: choose {' or '.join(BUDGET_MODES)}", param_hint="--budgets")
    sweep_spec = _sweep_spec(sweep)
    if sweep_spec and (seeds or simulate_gpus):
        raise typer.BadParameter("a sweep replays one trace; leave out --seeds / --simulate-gpus", param_hint="--sweep")
    knobs = {"checkpoint": checkpoint_minutes, "cycle": cycle_minutes, "usage_mode": usage_mode,
             "window": window_days, "half_life": half_life_days, "cap": min_runtime_cap_hours,
             "idle": idle_threshold, "shares": share, "balance": delivery_balance, "lane_reserve": lane_reserve,
             "budgets": budgets, "spare": spare_behind_owed,
             "own": spare_own_project}
    seed_list = [seed + k for k in range(seeds or 1)]
    if regime and not simulate_gpus:
        raise typer.BadParameter("a demand regime is the simulator's: give it with --simulate-gpus "
                                 "(a --warehouse's jobs are what they are)", param_hint="--regime")
    regime = regime or REGIME_NAMES[0]
    where = _seed_warehouses(seed_list, path, simulate_gpus, days, sim_start, sim_dir, config, regime)
    per_seed: dict[int, dict[str, dict]] = {}
    try:
        with _Bar(progress) as bar:
            for s in seed_list:
                cfg, params, trace, lo, hi = _load(where[s], config, start, end, inventory, seed=s, **knobs)
                tick = (lambda p, f, s=s: bar(f"{p} seed {s}", f)) if len(seed_list) > 1 else bar
                runs_s = compare.compare(trace, cfg, params, chosen, progress=tick)
                per_seed[s] = {summary["policy"]: summary for summary, _ in runs_s}
                if s == seed_list[0]:
                    first = (cfg, params, trace, lo, hi, runs_s)
            cfg, params, trace, lo, hi, runs = first
            rows = (compare.sweep(trace, cfg, sweep_spec[0], sweep_spec[1], policy=sweep_policy, params=params,
                                  progress=bar) if sweep_spec else None)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    provenance = (f"simulated: {simulate_gpus} GPUs, {days:g} days from {sim_start}, demand regime {regime}, "
                  f"{BUDGETS_SAY[budgets]}, one warehouse per seed" if simulate_gpus else
                  f"{where[seed_list[0]].name}: one warehouse, each seed its draws of never-started jobs")
    provenance += _lane_said(cfg, params, chosen)
    outcome_doc = _outcome(per_seed, chosen, where, provenance)
    if simulate_gpus:
        outcome_doc["demand_regime"] = regime
    text = compare.to_json(trace, params, runs, rows, sweep_parameter=sweep_spec[0] if sweep_spec else None,
                           sweep_policy=sweep_policy if sweep_spec else None, outcome=outcome_doc)
    _sweep_chart(chart, rows, sweep_spec, sweep_policy)
    title = (f"what-if {lo:%Y-%m-%d %H:%M}Z .. {hi:%Y-%m-%d %H:%M}Z: {len(trace.jobs)} jobs on "
             f"{trace.inventory.physical_gpus()} GPUs, trace seed {seed_list[0]}"
             + (f", simulated, demand regime {regime}" if simulate_gpus else "") + f", {BUDGETS_SAY[budgets]}")
    if len(seed_list) > 1:
        _show_outcome(text, outcome_doc, chosen, title=f"outcome over seeds {seed_list[0]}..{seed_list[-1]} "
                      f"({provenance}): median [min–max]", fmt=fmt, out=out)
        return
    _show_schedule(text, compare.side_by_side(runs), rows, chosen, sweep_spec, sweep_policy, title,
                   fmt=fmt, out=out, outcome_doc=outcome_doc)
    if trace.skipped:
        typer.echo(f"{len(trace.skipped)} job(s) could not be replayed, e.g. {trace.skipped[0][0]}: "
                   f"{trace.skipped[0][1]} (the JSON lists them)", err=True)


LANE_SAID = "; quick lane: "  # where the provenance names policy 4's lane (benchmarks/whatif_merge_seeds.py)


def _lane_said(cfg, params, chosen) -> str:
    """Policy 4's quick lane as the replay ran it (its reserve and limit move the waits and the
    preemptions a lot: BENCHMARKS.md issue 34), for the outcome's provenance; "" without policy 4."""
    from gpuledger.whatif.engine import replayed_lane
    from gpuledger.whatif.model import QUICK

    if QUICK not in chosen:
        return ""
    lane = replayed_lane(cfg, params)
    share, whole = lane.reserve_for(mig=True), lane.reserve_for(mig=False)
    reserve = (f"reserve {share:g} of each pool" if whole == share else
               f"reserve {share:g} of MIG pools, {whole:g} of whole-GPU pools") if share or whole else "no reserve"
    return f"{LANE_SAID}{reserve}, at most {lane.max_running_per_project} lane jobs per project"


def _seed_warehouses(seed_list, path, simulate_gpus, days, sim_start, sim_dir, config,
                     regime) -> dict[int, Path]:
    """seed -> the warehouse it replays: the one of --warehouse, or a simulated one per seed."""
    if not simulate_gpus:
        return dict.fromkeys(seed_list, warehouse_path(path))
    from gpuledger.config import ConfigError, load_config
    from gpuledger.whatif.seeds import simulated_warehouse

    if simulate_gpus % 8:
        raise typer.BadParameter(f"{simulate_gpus}: the simulator builds whole 8-GPU nodes; give a multiple of 8",
                                 param_hint="--simulate-gpus")
    begin = utc_option(sim_start, "--sim-start")
    try:
        cfg = load_config(config)
    except ConfigError as exc:
        raise UsageError(str(exc)) from None
    out = {}
    for s in seed_list:
        typer.echo(f"seed {s}: simulated warehouse of {simulate_gpus} GPUs, {days:g} days, regime {regime} ...",
                   err=True)
        out[s] = simulated_warehouse(sim_dir or Path("data/whatif-seeds"), gpus=simulate_gpus, days=days,
                                     seed=s, start=begin, config=cfg, regime=regime)
    return out


def _outcome(per_seed, chosen, where, regime: str) -> dict:
    from gpuledger.whatif import outcome

    return outcome.document(per_seed, chosen, sources={s: str(p) for s, p in where.items()}, regime=regime)


def _show_outcome(text: str, doc: dict, chosen, *, title: str, fmt: Format, out: Path | None) -> None:
    from gpuledger.cli.views import tables
    from gpuledger.cli.views.whatif import outcome_view
    from gpuledger.whatif import outcome

    frame = outcome.table_frame(doc["rows"], chosen)
    if _emit(text, frame, fmt, out, title, outcome_view(chosen)):
        return
    tables.print_table(frame, outcome_view(chosen), title=title)


def _chosen_policies(policies: str, sweep_policy: str) -> tuple[str, ...]:
    """--policies as names, each checked (and --sweep-policy's), in the order given."""
    chosen = tuple(p.strip() for p in policies.split(",") if p.strip())
    if not chosen:
        raise typer.BadParameter(f"give at least one of {', '.join(POLICY_NAMES)}", param_hint="--policies")
    for p in (*chosen, sweep_policy):
        if p not in POLICY_NAMES:
            raise typer.BadParameter(f"{p!r}: choose from {', '.join(POLICY_NAMES)}", param_hint="--policies")
    return chosen


def _sweep_spec(sweep: str | None) -> tuple[str, list] | None:
    """--sweep PARAMETER=V1,V2,... as (parameter, values), the parameter one the what-if sweeps."""
    from gpuledger.whatif import compare

    spec = _sweep_values(sweep) if sweep else None
    if spec and spec[0] not in compare.SWEEPABLE:
        raise typer.BadParameter(f"{spec[0]!r}: sweep one of {', '.join(compare.SWEEPABLE)}", param_hint="--sweep")
    return spec


def _sweep_chart(chart: Path | None, rows, sweep_spec, sweep_policy: str) -> None:
    """--chart: the sweep's SVG chart (a note instead when there is no sweep)."""
    from gpuledger.whatif import compare

    if chart and rows:
        chart.write_text(compare.sweep_chart(rows, sweep_spec[0], sweep_policy), encoding="utf-8")
        typer.echo(f"wrote {chart}", err=True)
    elif chart:
        typer.echo("--chart draws a sweep: give --sweep PARAMETER=V1,V2,...", err=True)


def _show_schedule(text: str, frames: dict, rows, chosen, sweep_spec, sweep_policy: str, title: str, *,
                   fmt: Format, out: Path | None, outcome_doc: dict | None = None) -> None:
    """The schedule what-if written (--format / --out / --json) or printed: the summary and the
    per-project delivery side by side, then the sweep's table."""
    from gpuledger.cli.views import tables
    from gpuledger.cli.views.whatif import projects_view, summary_view, sweep_view

    sweep = None
    if rows:
        import polars as pl

        sweep = (pl.DataFrame(rows), sweep_view(), f"sweep {sweep_spec[0]} ({sweep_policy})")
    main = sweep or (frames["summary"], summary_view(chosen), title)
    if _emit(text, main[0], fmt, out, main[2], main[1]):
        return
    tables.print_table(frames["summary"], summary_view(chosen), title=title)
    tables.print_table(frames["projects"], projects_view(chosen), title="delivered ÷ owed GPU-hours per project")
    if outcome_doc is not None:
        from gpuledger.cli.views.whatif import outcome_view
        from gpuledger.whatif import outcome

        tables.print_table(outcome.table_frame(outcome_doc["rows"], chosen), outcome_view(chosen),
                           title="outcome (Ai2's measures; --seeds N for min, median and max)")
    if sweep:
        # the swept value as given (0.25, not a number cell's one decimal, 0.2); files keep the number
        tables.print_table(sweep[0].with_columns(sweep[0]["value"].cast(str)), sweep[1], title=sweep[2])


@app.command("procurement")
def procurement(
    start: str | None = StartOpt,
    end: str | None = EndOpt,
    policy: str = typer.Option(
        "reclaim",
        "--policy",
        help="price the demand this scheduling policy served (priority / fair-share / reclaim)",
    ),
    inventory: Path | None = InventoryOpt,
    reserved: list[str] | None = typer.Option(
        None, "--reserved", help="MODEL=N reserved GPUs (default: the cheapest level)"
    ),
    owned: list[str] | None = typer.Option(
        None, "--owned", help="MODEL=N GPUs owned for the break-even (default: peak demand)"
    ),
    spot_rate: float | None = typer.Option(
        None,
        "--spot-interruptions-per-hour",
        min=0,
        max=60,  # one a minute per job already interrupts everything; 1e9 exhausted memory
        help="spot interruptions per job-hour (default policy.whatif)",
    ),
    checkpoint_minutes: float | None = typer.Option(
        None, "--checkpoint-minutes", min=1, help="checkpoint interval"
    ),
    seed: int = typer.Option(1, "--seed", min=0, max=2**32 - 1, help="seed of the spot interruptions"),
    fmt: Format = WhatifFormatOpt,
    out: Path | None = OutOpt,
    _json: Path | None = JsonOpt,
    progress: bool = ProgressOpt,
    path: WarehouseOpt = None,
    config: ConfigOpt = None,
) -> None:
    """Price the served demand under capacity mixes (on-demand; reserved + on-demand; reserved + spot
    for checkpointable training + on-demand) and the break-even month of owning the GPUs."""
    from gpuledger.cli.views.whatif import mixes_frame, mixes_view
    from gpuledger.whatif import procurement as proc
    from gpuledger.whatif.engine import simulate

    _check_out(fmt, out)
    if policy not in POLICY_NAMES:
        raise typer.BadParameter(f"{policy!r}: choose from {', '.join(POLICY_NAMES)}", param_hint="--policy")
    reserved_n, owned_n = _pairs(reserved, "--reserved", cast=int), _pairs(owned, "--owned", cast=int)  # before any work
    cfg, params, trace, lo, hi = _load(path, config, start, end, inventory, seed=seed,
                                       checkpoint=checkpoint_minutes)
    with _Bar(progress) as bar:
        result = simulate(trace, cfg, policy, params, progress=lambda f: bar(policy, f))
    pieces = proc.pieces_from_run(result)
    rate = cfg.policy.whatif.spot_interruptions_per_hour if spot_rate is None else spot_rate
    mixes = proc.price_mixes(pieces, trace.horizon_s, cfg.rate_card, at=lo.date(), currency=cfg.currency,
                             reserved_gpus=reserved_n,
                             interruptions_per_hour=rate,
                             checkpoint_interval_minutes=params.checkpoint_interval_minutes, seed=seed)
    even = proc.break_even(mixes, pieces, trace.horizon_s, cfg.hardware, owned_gpus=owned_n)
    frame, totals = mixes_frame(mixes)
    doc = proc.to_json(mixes, even, totals, start=lo, end=hi, policy=policy, interruptions_per_hour=rate,
                       checkpoint_interval_minutes=params.checkpoint_interval_minutes)
    title = f"capacity mixes for the demand {policy} served, {lo:%Y-%m-%d}..{hi:%Y-%m-%d}"
    if not _emit(doc, frame, fmt, out, title, mixes_view()):
        _show_procurement(frame, totals, even, title, has_hardware=bool(cfg.hardware))
    for m in mixes:
        for note in m.unpriced:
            typer.echo(f"unpriced: {note} (add it to the rate card)", err=True)


def _show_procurement(frame, totals, even, title: str, *, has_hardware: bool) -> None:
    """The mixes per model and in all, then owning against renting (or why there is no break-even)."""
    from gpuledger.cli.views import tables
    from gpuledger.cli.views.whatif import break_even_view, mixes_view

    tables.print_table(frame, mixes_view(), title=title)
    tables.print_table(totals, mixes_view(total=True), title="all models")
    if even:
        import polars as pl

        tables.print_table(pl.DataFrame([e.__dict__ for e in even]), break_even_view(),
                           title="owning against renting (the cheapest mix), 30-day months")
    elif not has_hardware:
        typer.echo('no `hardware` costs in the config: no break-even month (see README "What-if")', err=True)
