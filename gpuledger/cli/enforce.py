"""`gpuledger enforce plan | apply | explain | replay | preemptions`.

Light on purpose (loaded for --help): polars, DuckDB and the kubernetes client load inside the
commands. Every planned and applied action is an audit row in the warehouse (enforcement_audit).
"""

from __future__ import annotations

from datetime import datetime
from enum import Enum
from pathlib import Path

import typer

from gpuledger import warehouse
from gpuledger.cli import options
from gpuledger.cli.options import (
    ConfigOpt,
    Format,
    FormatOpt,
    WarehouseOpt,
    out_file,
    utc_option,
    warehouse_config,
    warehouse_path,
)
from gpuledger.cli.views import tables
from gpuledger.cli.views.show import show_frame
from gpuledger.errors import UsageError
from gpuledger.rules.clock import utc_now

app = typer.Typer(help="Enforcement: budget-funded priorities and squatter preemption for the scheduler "
                       "(dry run unless `apply --yes`).", no_args_is_help=True)


class BackendName(str, Enum):
    kueue = "kueue"
    kubernetes = "kubernetes"
    slurm = "slurm"
    plan_file = "plan-file"


ClusterOpt = typer.Option(None, "--cluster",
                          help="the cluster the backend acts on (Slurm: sent as -M, and the controller's "
                               "ClusterName must match; Kubernetes: default the kubeconfig context's name, as "
                               "`ingest kubernetes` names it); actions decided for any other cluster are refused")
NowOpt = typer.Option(None, "--now", help="plan as of this UTC time, or `data` for the newest data "
                                          "(default: the wall clock; older data trips the stale-data guard)")
NamespaceOpt = typer.Option([], "--namespace", "-n",
                            help="Kubernetes: only these namespaces (repeat; for the namespaced Role of "
                                 "deploy/kubernetes/rbac-namespaced.yaml); default all")
OutOpt = typer.Option(None, "--out", "-o", callback=lambda value: out_file(value),
                      help="write the plan here (json or the table as text); default stdout")


def _now(con, text: str | None) -> datetime:
    if text == "data":
        from gpuledger import facts

        return facts.data_now(con)
    return utc_option(text, "--now") or utc_now()


def plan_cycle(path: Path, config: Path | None, now_text: str | None, *, record: bool = True, observe=None):
    """Gather, decide, record: (actions, plan_id, now, cfg, situation). ``observe``: a backend whose
    live view (labels, annotations, Requeue flag, current priority) joins the inputs."""
    from gpuledger.enforce import cycle

    if record:  # brings the schema up to date (readers never change the file), briefly
        with warehouse.open_writer(path):
            pass
    with warehouse.open_reader(path) as con:
        cfg = warehouse_config(con, config, write=False)
        now = _now(con, now_text)
    if observe is not None and hasattr(observe, "timeout_s"):  # the site's deadline for every call
        observe.timeout_s = cfg.policy.enforcement.scheduler_timeout_seconds
    observed, observed_by, observed_cluster = cycle.look(observe)
    if observe is not None and getattr(observe, "bound", None) and observe.bound():
        typer.echo(f"warning: {observe.bound()}", err=True)
    actions, plan_id, situation = cycle.plan(lambda: warehouse.open_reader(path), lambda: warehouse.open_writer(path),
                                             cfg, now, record=record, observed=observed, observed_by=observed_by,
                                             observed_cluster=observed_cluster)
    if observed is None and any(a.action == "none" and "without the scheduler's live view" in a.reason
                                for a in actions):
        typer.echo("planned without the scheduler's live view: no preemption is planned (plan with --observe "
                   "slurm|kueue|kubernetes)", err=True)
    return actions, plan_id, now, cfg, situation


def _print_plan(actions, plan_id, now, fmt: Format, out: Path | None, *, show_none: bool = True,
                wide: bool = False, columns: str | None = None) -> None:
    from gpuledger.cli.views.plan import PLAN
    from gpuledger.enforce.backends import planfile

    if fmt is Format.json:  # the plan file `enforce apply --plan` reads
        text = planfile.to_json(actions, plan_id=plan_id, planned_at=now)
        out.write_text(text) if out else typer.echo(text, nl=False)
        return
    shown = actions if show_none else [a for a in actions if a.action != "none"]
    counts = {k: sum(1 for a in actions if a.action == k) for k in ("set-priority", "warn", "preempt", "hold",
                                                                     "release", "none")}
    counts = {k: v for k, v in counts.items() if v or k not in ("hold", "release")}  # a lead's holds, when any
    title = (f"enforcement plan {plan_id or '(not recorded)'} at {now:%Y-%m-%d %H:%M}Z — "
             + ", ".join(f"{v} {k}" for k, v in counts.items())
             + (" — DRY RUN" if actions and actions[0].dry_run else ""))
    show_frame(planfile.frame(shown), fmt, out, title, PLAN, wide, columns)


@app.command("plan")
def plan(
    fmt: Format = typer.Option(Format.table, "--format", "-f",
                               help="table, json (the plan file `apply --plan` reads), csv or parquet"),
    out: Path | None = OutOpt, now: str | None = NowOpt,
    show_none: bool = typer.Option(True, "--none/--no-none", help="list the jobs where nothing is done, with why"),
    record: bool = typer.Option(True, "--record/--no-record",
                                help="record the plan (audit rows, warnings issued) in the warehouse"),
    observe: BackendName | None = typer.Option(None, "--observe",
                                               help="read the jobs' live state (identity, labels / annotations, "
                                                    "Requeue flag, current priority) from this scheduler first "
                                                    "(reads only); without it nothing is preempted"),
    kubeconfig: str | None = typer.Option(None, "--kubeconfig", help="kubeconfig file (with --observe)"),
    context: str | None = typer.Option(None, "--context", help="kubeconfig context (with --observe)"),
    namespaces: list[str] = NamespaceOpt, cluster: str | None = ClusterOpt,
    wide: bool = tables.WideOpt, columns: str | None = tables.ColumnsOpt,
    warehouse_file: WarehouseOpt = None, config: ConfigOpt = None,
) -> None:
    """Decide this cycle's actions (set-priority / warn / preempt / none) with the reasons; changes
    nothing in any scheduler. The JSON is what `apply --plan FILE` reads."""
    from gpuledger.enforce import backends as registry

    seer = None
    if observe is not None and observe is not BackendName.plan_file:
        seer = registry.get(observe.value, cluster=cluster,
                            **({"kubeconfig": kubeconfig, "context": context, "namespaces": namespaces or None}
                               if observe in (BackendName.kueue, BackendName.kubernetes) else {}))
    actions, plan_id, at, _, _ = plan_cycle(warehouse_path(warehouse_file), config, now, record=record, observe=seer)
    _print_plan(actions, plan_id, at, fmt, out, show_none=show_none, wide=wide, columns=columns)


@app.command("apply")
def apply(
    backend: BackendName = typer.Option(..., "--backend", "-b", help="kueue, kubernetes, slurm or plan-file"),
    plan_file: Path | None = typer.Option(None, "--plan", help="a plan written by `enforce plan --format json` "
                                                               "(default: plan this cycle now)"),
    yes: bool = typer.Option(False, "--yes", help="really act (otherwise a dry run that calls nothing)"),
    server_dry_run: bool = typer.Option(False, "--server-dry-run",
                                        help="with --yes: send the requests with dryRun=All (Kubernetes)"),
    kubeconfig: str | None = typer.Option(None, "--kubeconfig", help="kubeconfig file (Kubernetes backends)"),
    context: str | None = typer.Option(None, "--context", help="kubeconfig context"),
    out: Path | None = typer.Option(None, "--out", "-o", help="plan-file backend: where to write the actions"),
    namespaces: list[str] = NamespaceOpt, cluster: str | None = ClusterOpt,
    now: str | None = NowOpt,
    warehouse_file: WarehouseOpt = None, config: ConfigOpt = None,
) -> None:
    """Act on a plan through one backend. Without --yes (or while policy.enforcement.dry_run is
    true) it is a dry run. Applying the same plan twice performs each action once."""
    from gpuledger.enforce import backends as registry
    from gpuledger.enforce import cycle

    path = warehouse_path(warehouse_file)
    with warehouse.open_writer(path):  # the schema up to date (readers never change the file)
        pass
    with warehouse.open_reader(path) as con:
        cfg = warehouse_config(con, config, write=False)
    policy = cfg.policy.enforcement
    if policy.kill_switch:
        typer.echo("the kill switch is on (policy.enforcement.kill_switch): nothing is applied")
        return
    dry_run = not yes or policy.dry_run
    if yes and policy.dry_run:
        typer.echo("policy.enforcement.dry_run is true: a dry run despite --yes (set it to false and "
                   "`gpuledger config load` to act)", err=True)
    chosen = registry.get(backend.value, **_backend_options(backend, policy, kubeconfig=kubeconfig, context=context,
                                                            server_dry_run=server_dry_run, namespaces=namespaces,
                                                            out=out, cluster=cluster))
    actions, plan_id, planned_at, applied_at = _actions_to_apply(plan_file, now, path, config, chosen)
    run = cycle.apply_plan(lambda: warehouse.open_reader(path), lambda: warehouse.open_writer(path), actions,
                           chosen, dry_run=dry_run, planned_at=planned_at, cfg=cfg, applied_at=applied_at)
    if backend is BackendName.plan_file and not dry_run:
        chosen.finish(planned_at)
    _print_run(run, "dry run" if dry_run else ("server dry run" if server_dry_run else "applied"), plan_id, chosen)
    if run.fatal is not None:
        raise run.fatal


def _backend_options(backend: BackendName, policy, *, kubeconfig, context, server_dry_run: bool, namespaces,
                     out: Path | None, cluster: str | None = None) -> dict:
    """The chosen backend's options from the command line and policy.enforcement."""
    if backend is BackendName.plan_file:
        if out is None:
            raise UsageError("--backend plan-file needs --out FILE (where the actions go)")
        return {"out": out}
    options: dict = {"timeout_s": policy.scheduler_timeout_seconds, "cluster": cluster}
    if backend in (BackendName.kueue, BackendName.kubernetes):
        options |= {"kubeconfig": kubeconfig, "context": context, "server_dry_run": server_dry_run,
                    "namespaces": namespaces or None}
        if backend is BackendName.kubernetes:
            options["grace_period_s"] = policy.eviction_grace_period_seconds
    elif backend is BackendName.slurm:
        options |= {"qos_funded": policy.slurm_qos_funded, "qos_unfunded": policy.slurm_qos_unfunded}
    return options


def _actions_to_apply(plan_file: Path | None, now: str | None, path: Path, config: Path | None, chosen):
    """(actions, plan id, planned at, applied at): the --plan file's, or this cycle's planned now
    with the backend's live view — a dry run too (reads only), so it says exactly what the real
    run does."""
    from gpuledger.enforce.backends import planfile

    if plan_file is None:
        actions, plan_id, planned_at, _, _ = plan_cycle(path, config, now, observe=chosen)
        return actions, plan_id, planned_at, planned_at
    plan_id, planned_at, actions = planfile.read(plan_file)
    if any(a.action_id is None for a in actions if a.action != "none"):
        raise UsageError(f"--plan {plan_file}: actions without action_id; write the plan with "
                         "`gpuledger enforce plan --format json` (it records them)")
    applied_at = utc_option(now, "--now") if now and now != "data" else utc_now()
    return actions, plan_id, planned_at or utc_now(), applied_at


def _print_run(run, mode: str, plan_id, chosen) -> None:
    """What was prepared, each action's outcome, and the run's summary line."""
    for line in run.prepared:
        typer.echo(line)
    for action, outcome in run.results:
        extra = f" [{outcome.error}]" if outcome.error else ""
        typer.echo(f"{outcome.outcome:<14} {action.action:<12} {action.cluster}/{action.job_id}: {outcome.detail}{extra}")
    failed = sum(1 for _, o in run.results if o.outcome in ("error", "refused"))
    typer.echo(f"{mode}: {run.performed} action(s) performed, {len(run.already_done)} already done before, "
               f"{failed} failed or refused (plan {plan_id}, backend {chosen.name})")


@app.command("explain")
def explain(
    job: str = typer.Argument(..., help="the job id (as in `gpuledger report squatters` / the plan)"),
    cluster: str | None = typer.Option(None, "--cluster", help="when the id exists on several clusters"),
    warehouse_file: WarehouseOpt = None,
) -> None:
    """Why a job has its priority, was warned or was preempted, with the figures (from the audit)."""
    import json

    from gpuledger.enforce import audit, scheduler_view, team_store

    with warehouse.open_reader(warehouse_path(warehouse_file)) as con:
        rows = audit.job_rows(con, job, cluster)
        warnings = audit.load_warnings(con)
        history = audit.load_history(con)
        said = scheduler_view.scheduler_words(con, cluster, job)
        story = [r for r in team_store.job_story(con, job) if cluster is None or r[0] == cluster]
        clusters = sorted({r["cluster"] for r in rows} | {c for c, _ in said} | {r[0] for r in story})
        place = scheduler_view.queue_place(con, clusters[0], job) if len(clusters) == 1 else None
    if not rows and not said and not story:
        raise UsageError(f"job {job!r}: no enforcement record; run `gpuledger enforce plan` first (or check "
                         "the id with `gpuledger report squatters --wide`)")
    if len(clusters) > 1:
        raise UsageError(f"job {job!r} exists on clusters {', '.join(clusters)}: pass --cluster")
    key = (clusters[0], job)
    _explain_queue(place, [w for _, w in said], job, key[0])
    for _, at, words in story:  # a lead's and the owner's own choices (issue 38), which the actions below follow
        typer.echo(f"  {at:%Y-%m-%d %H:%M}Z {words}")
    if not rows:
        return
    typer.echo(f"job {key[0]}/{job} (project {rows[0]['project']}): every action enforcement planned for it, "
               "oldest first, each with what applying it did")
    applied: dict[str, list[dict]] = {}
    for r in rows:
        if r["phase"] == "applied":
            applied.setdefault(r["action_id"], []).append(r)
    for r in sorted((r for r in rows if r["phase"] == "planned"), key=lambda r: (r["planned_at"], r["action_id"])):
        extra = f" priority {r['priority']}" if r["priority"] is not None else ""
        extra += f" ({r['mode']})" if r["mode"] else ""
        typer.echo(f"  {r['planned_at']:%Y-%m-%d %H:%M}Z planned {r['action']}{extra}: {r['reason']}")
        figures = json.loads(r["inputs"] or "{}")
        figures.pop("_target", None)
        if figures:
            typer.echo("    figures: " + ", ".join(f"{k}={v}" for k, v in sorted(figures.items()) if v is not None))
        if r["min_runtime_until"] is not None:
            typer.echo(f"    funded={r['funded']}, protected until {r['min_runtime_until']:%Y-%m-%d %H:%M}Z")
        if r["warned_at"] is not None:
            typer.echo(f"    relies on the warning delivered at {r['warned_at']:%Y-%m-%d %H:%M}Z")
        for a in sorted(applied.pop(r["action_id"], []), key=lambda a: a["attempt"]):
            why = "; ".join(w for w in (a.get("detail"), a["error"] and f"the scheduler said: {a['error']}") if w)
            typer.echo(f"    applied {a['recorded_at']:%Y-%m-%d %H:%M}Z via {a['backend']}: {a['outcome']}"
                       f"{' (dry run)' if a['dry_run'] else ''}{': ' + why if why else ''}")
    for w in warnings.get(key, []):
        reached = (f"delivered at {w.delivered_at:%Y-%m-%d %H:%M}Z" if w.delivered_at
                   else "not delivered (no backend warning applied, no alert sent)")
        typer.echo(f"  warned ({w.stage}) at {w.warned_at:%Y-%m-%d %H:%M}Z for idling since "
                   f"{w.idle_since:%Y-%m-%d %H:%M}Z: {reached}")
    h = history.get(key)
    if h is not None and h.preemptions:
        typer.echo(f"  preempted {h.preemptions} time(s), last at {h.last_preempted_at:%Y-%m-%d %H:%M}Z")


def _explain_queue(place, said: list, job: str, cluster: str) -> None:
    """gpuledger's rank beside the scheduler's latest reason, and whether they agree."""
    from gpuledger.enforce.scheduler_view import SCHEDULER_NAMES, compare

    latest = said[-1] if said else None
    if place is None and latest is None:
        return
    _, sentence = compare(place, latest)
    typer.echo(f"job {cluster}/{job} in the queue: {sentence}")
    for w in said[:-1][-5:]:  # the scheduler's earlier reasons, newest last
        name = SCHEDULER_NAMES.get(w.scheduler, w.scheduler)
        typer.echo(f"  earlier, from {w.observed_at:%Y-%m-%d %H:%M}Z: {name} said `{w.reason}`"
                   + (f" ({w.message})" if w.message else ""))


@app.command("preemptions")
def preemptions(fmt: Format = FormatOpt, out: Path | None = options.OutOpt,
                warehouse_file: WarehouseOpt = None) -> None:
    """Jobs gpuledger preempted, most often first (repeated preemption of one workload shows here)."""
    from gpuledger.enforce import audit

    with warehouse.open_reader(warehouse_path(warehouse_file)) as con:
        rows = audit.preemption_counts(con)
        left = audit.preemptions_not_done(con)
    if fmt is not Format.table or out is not None:
        import polars as pl

        frame = pl.DataFrame(rows, schema={"cluster": pl.String, "job_id": pl.String, "preemptions": pl.Int64,
                                           "last_preempted_at": pl.Datetime("us"), "why": pl.String}, orient="row")
        show_frame(frame, fmt, out, "preempted jobs (UTC)", PREEMPTIONS)
        return
    if not rows:
        typer.echo("no job has been preempted by gpuledger")
    for cluster, job_id, n, last, why in rows:
        typer.echo(f"{n:>4}  {cluster}/{job_id}  last {last:%Y-%m-%d %H:%M}Z" + (f"  why: {why}" if why else ""))
    if left:
        typer.echo(f"preemptions an apply run did not perform ({len(left)} newest), with why:")
    for at, cluster, job_id, outcome, cause, why in left:
        typer.echo(f"  {at:%Y-%m-%d %H:%M}Z {cluster}/{job_id}: {outcome} ({cause}): {why}")


PREEMPTIONS = tables.View(columns=(
    tables.Column("preemptions", "times", "int", key=True), tables.Column("cluster", "cluster", key=True),
    tables.Column("job_id", "job", key=True), tables.Column("last_preempted_at", "last\n(UTC)", "datetime"),
    tables.Column("why", "why (the last one)"),
))


@app.command("replay")
def replay(
    start: str | None = typer.Option(None, "--start", help="first cycle (UTC time; default: the first sample)"),
    end: str | None = typer.Option(None, "--end", help="last cycle at or before this time (default: the newest data)"),
    every: str = typer.Option("15m", "--every", help="cycle interval, e.g. 15m"),
    only_when_idle: bool = typer.Option(False, "--only-when-idle",
                                        help="plan only the cycles with a squatting finding (fast; the "
                                             "others cannot warn or preempt a squatter)"),
    show_all: bool = typer.Option(False, "--all", help="also print every demand preemption (unfunded burst, "
                                                       "past minimum runtime), not only their count"),
    warehouse_file: WarehouseOpt = None, config: ConfigOpt = None,
) -> None:
    """What the policy would have done over past data, cycle by cycle, as a dry run: the warnings it
    issues are kept in memory (so a squatter's warning is followed by its preemption) and nothing is
    recorded or sent. Prints each squatter's warn and preempt the first cycle it is planned, then a
    summary. Past data does not react to the plans: a preempted job stays in it, so after its first
    preemption nothing more is printed for it (the plan had stopped it)."""
    from datetime import timedelta

    from gpuledger.cli.options import check_range
    from gpuledger.rules.clock import parse_duration_s

    lo, hi = utc_option(start, "--start"), utc_option(end, "--end")
    check_range(lo, hi)
    step = timedelta(seconds=parse_duration_s(every))
    if step.total_seconds() <= 0:
        raise UsageError(f"--every {every!r}: give a positive interval such as 15m")
    path = warehouse_path(warehouse_file)
    lo, hi = _replay_range(path, lo, hi, step)
    from gpuledger.enforce.replay import ReplayMemory

    tally = _ReplayTally(show_all=show_all)
    memory = ReplayMemory()  # this replay's own warnings and preemptions
    at = lo
    while at <= hi:
        tally.cycles += 1
        if not only_when_idle or _squatting_at(path, config, at):
            tally.planned += 1
            tally.record(at, *_replay_cycle(path, config, at, memory))
        at += step
    typer.echo(tally.summary(lo, every))


def _replay_range(path: Path, lo: datetime | None, hi: datetime | None, step) -> tuple[datetime, datetime]:
    """The replay's first and last cycle: --start / --end, else the hour of the first sample plus
    one step, and the newest data."""
    from gpuledger.cli.options import check_range

    with warehouse.open_writer(path):  # the schema up to date before the first read
        pass
    if lo is None or hi is None:
        from gpuledger import facts

        with warehouse.open_reader(path) as con:
            first = con.execute("SELECT min(ts) FROM gpu_samples").fetchone()[0]
            newest = facts.data_now(con)
        if first is None and lo is None:
            raise UsageError("the warehouse holds no samples: give --start")
        lo = lo or first.replace(minute=0, second=0, microsecond=0) + step
        hi = hi or newest
        check_range(lo, hi)
    return lo, hi


def _replay_cycle(path: Path, config: Path | None, at: datetime, memory):
    """One replayed cycle at ``at``: the situation the warehouse gives, as if the earlier cycles'
    plans had been carried out (enforce/replay.ReplayMemory), and the policy's dry-run actions,
    remembered in ``memory``."""
    from gpuledger.enforce import inputs, policy

    with warehouse.open_reader(path) as con:
        cfg = warehouse_config(con, config, write=False)
        # a what-if over recorded data: the warehouse stands for the scheduler's view (modes follow
        # the recorded facts; a real run reads labels and the Requeue flag live)
        situation = memory.situation(inputs.gather(con, cfg, now=at), observed_by="the warehouse (replay)")
    actions = policy.decide(situation, cfg.policy.enforcement.model_copy(update={"dry_run": True}))
    memory.carried_out(actions, at)
    return situation, actions, cfg.policy.enforcement


class _ReplayTally:
    """What a replay planned, job by job: each squatter's warn and preempt printed the first cycle
    it is planned (every demand preemption too with ``show_all``), and the counts for the summary."""

    def __init__(self, *, show_all: bool) -> None:
        self.show_all = show_all
        self.cycles = self.planned = 0
        self.seen: set[tuple] = set()
        self.stopped: set[tuple] = set()  # jobs whose preemption was printed: the plan stopped them
        self.warned, self.squatters, self.exempt_running = set(), set(), set()
        # each job preempted, by what it was when the plan stopped it: a squatter then, or other work
        # (a job preempted for waiting funded work that the recorded history shows squatting only
        # later is other work; nothing after its preemption is counted or printed)
        self.preempted_squatting: set[tuple] = set()
        self.preempted_other: set[tuple] = set()

    def record(self, at: datetime, situation, actions, rails) -> None:
        from gpuledger.enforce.policy import exemption

        names = {j.key: j.name for j in situation.jobs}
        self.exempt_running |= {j.key for j in situation.jobs if j.running and exemption(j, rails)}
        self.squatters |= {(f.cluster, f.job_id) for f in situation.findings if f.finding == "squatting"}
        for a in actions:
            key = (a.cluster, a.job_id)
            if a.action not in ("warn", "preempt"):
                continue
            if key in self.stopped:  # the plan stopped it: what the recorded job did after is not replayed
                continue
            if a.action == "warn":
                self.warned.add(key)
            else:  # its first preemption: by what it was then (a squatter, or other work)
                (self.preempted_squatting if key in self.squatters else self.preempted_other).add(key)
                if a.rule != "squatter" and not self.show_all and key not in self.squatters:
                    self.stopped.add(key)  # stopped for waiting funded work, not a squatter: --all prints it
                    continue
            if (*key, a.action, a.stage, a.rule) in self.seen:
                continue
            self.seen.add((*key, a.action, a.stage, a.rule))
            if a.action == "preempt":
                self.stopped.add(key)
            what = a.action + (f" ({a.mode})" if a.mode else f" ({a.stage})" if a.stage else "")
            typer.echo(f"{at:%Y-%m-%d %H:%M}Z  {what:<24} {a.cluster}/{a.job_id} {names.get(key) or ''} "
                       f"[{a.project}, {a.kind}]: {a.reason}")

    def summary(self, lo: datetime, every: str) -> str:
        exempt = self.exempt_running
        return (f"{self.cycles} cycles from {lo:%Y-%m-%d %H:%M}Z every {every}, {self.planned} planned: "
                f"{len(self.warned)} job(s) warned, {len(self.preempted_squatting)} squatter(s) preempted, "
                f"{len(self.preempted_other)} other job(s) preempted for waiting funded work"
                f"{'' if self.show_all else ' (--all lists them)'}; {len(exempt)} exempt job(s) running "
                f"(production inference and exempt namespaces/labels): warned {len(exempt & self.warned)}, "
                f"preempted {len(exempt & (self.preempted_squatting | self.preempted_other))}")


def _squatting_at(path: Path, config: Path | None, at: datetime) -> bool:
    """Whether any running job has a squatting finding at ``at``."""
    from gpuledger import facts

    with warehouse.open_reader(path) as con:
        cfg = warehouse_config(con, config, write=False)
        found = facts.findings(con, policy=cfg.policy, now=at, include_exempt=True, exact_moment=True).frame
    return found.filter(found["finding"] == "squatting").height > 0
