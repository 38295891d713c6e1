"""One enforcement cycle over the warehouse, for the CLI and the Dagster assets alike: gather the
situation and decide (a reader), record the plan (a writer), act on a recorded plan through a
backend and record the outcomes. Time is passed in."""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager
from datetime import datetime, timedelta

from gpuledger.enforce import audit, inputs, policy
from gpuledger.enforce.apply import ApplyRun, apply_actions
from gpuledger.enforce.model import PREEMPT, WAITING, Action, Situation

from gpuledger import facts
from gpuledger.config import Config
from gpuledger.ingest.scheduler_reasons import SLURM, SchedulerReason, record_reasons
from gpuledger.rules.clock import utc_now

Opener = Callable[[], AbstractContextManager]


def decide_at(con, cfg: Config, now: datetime, observed: dict | None = None,
              observed_by: str | None = None, observed_cluster: str | None = None) -> tuple[list[Action], Situation]:
    situation = inputs.gather(con, cfg, now=now, observed=observed, observed_by=observed_by,
                              observed_cluster=observed_cluster)
    return policy.decide(situation, cfg.policy.enforcement), situation


def look(backend) -> tuple[dict | None, str | None, str | None]:
    """(live view, who saw it, of which cluster) from a backend that observes; (None, None, None)
    without one (then nothing is preempted)."""
    if backend is None or not backend.observes:
        return None, None, None
    cluster = backend.cluster_name()  # first: a controller of another cluster is refused before reading it
    return backend.observe(), backend.name, cluster


def plan(reader: Opener, writer: Opener, cfg: Config, now: datetime, *, record: bool = True,
         observed: dict | None = None, observed_by: str | None = None,
         observed_cluster: str | None = None) -> tuple[list[Action], str | None, Situation]:
    """(actions, plan_id or None when not recorded, situation). ``observed``: Backend.observe()
    (None: no live view, so the plan preempts nothing and says so) of ``observed_cluster``."""
    with reader() as con:
        actions, situation = decide_at(con, cfg, now, observed, observed_by, observed_cluster)
    plan_id = None
    if record:
        with writer() as con:
            plan_id = audit.record_plan(con, actions, now=now)
            record_reasons(con, live_reasons(observed, observed_by, observed_cluster))
    return actions, plan_id, situation


def live_reasons(observed: dict | None, observed_by: str | None, cluster: str | None,
                 at: datetime | None = None) -> list[SchedulerReason]:
    """The scheduler's reason for each waiting job of a live view (Slurm's ``Reason=`` in
    ``scontrol show job``), as of ``at`` (default: the wall clock — when it was read), for
    scheduler_reasons (migration 027: kept as changes only)."""
    if not observed or observed_by != "slurm" or not cluster:
        return []
    at = at or utc_now()
    return [SchedulerReason(cluster, job_id, at, SLURM, view.get("state"), view["reason"], None, "scontrol")
            for job_id, view in sorted(observed.items())
            if view.get("phase") == WAITING and view.get("reason")]


def apply_plan(reader: Opener, writer: Opener, actions: list[Action], backend, *, dry_run: bool,
               planned_at: datetime, cfg: Config | None = None, applied_at: datetime | None = None) -> ApplyRun:
    """Act on recorded actions (each at most once across runs) and record every outcome; a fatal
    error (credential, scheduler unreachable) is in ``run.fatal`` after what was done is recorded.

    With ``cfg``, every preemption is checked again at ``applied_at`` (the run's clock): the
    rolling caps over what earlier runs performed, and the freshness of its cluster's data — a
    plan reviewed for an hour is not acted on with hour-old data."""
    with reader() as con:
        done = audit.done_ids(con, [a.action_id for a in actions if a.action_id])
        guard = None if cfg is None else _guard(con, cfg, applied_at or planned_at, actions)
    run = apply_actions(actions, backend, dry_run=dry_run, already_done=done, guard=guard)
    with writer() as con:
        audit.record_applied(con, run.audit_rows(), backend=backend.name, dry_run=dry_run, now=planned_at,
                             applied_at=applied_at)
    return run


def _guard(con, cfg: Config, at: datetime, actions: list[Action] = ()):
    """The apply-time rails for one run, as a function of one preemption: its reason or None. Reads
    what it needs now (``con`` is closed by the time the run acts)."""
    rails = cfg.policy.enforcement
    samples, jobs = inputs.freshness(con, at)
    recent = audit.recent_preemptions(con, since=at - timedelta(hours=1))
    this_run: list[Action] = []

    def check(action: Action) -> str | None:
        view = Situation(now=at, jobs=[], samples_as_of=samples, jobs_as_of=jobs)
        source = "samples" if action.rule == "squatter" else "jobs"
        stale = policy.stale(view, rails, action.cluster, source)
        if stale:
            return f"at apply time {stale}"
        projects = [r[2] for r in recent] + [a.project for a in this_run]
        if len(recent) + len(this_run) >= rails.max_preemptions_per_hour:
            return (f"the cap of {rails.max_preemptions_per_hour} preemptions per rolling hour is reached "
                    f"({len(recent) + len(this_run)} performed); next cycle")
        if projects.count(action.project) >= rails.max_preemptions_per_project_per_hour:
            return (f"project {action.project} reached the cap of {rails.max_preemptions_per_project_per_hour} "
                    "preemptions per rolling hour; next cycle")
        why = still_funded(action)
        if why:
            return why
        if action.action == PREEMPT:
            this_run.append(action)
        return None

    funding: dict = {}
    if any(_serves_funded(a) for a in actions):  # read only when a preemption serves funded work

        funding = {(r["cluster"], r["job_id"]): r
                   for r in facts.funding(con, policy=cfg.policy, now=at).frame.iter_rows(named=True)}

    def still_funded(action: Action) -> str | None:
        """A preemption for a funded job goes ahead only while that job is still funded by the
        warehouse's figures at apply time (its budget may have run out since the plan)."""
        if not _serves_funded(action):
            return None
        serves = action.serves
        row = funding.get((action.cluster, serves["job_id"]))
        if row is not None and not row.get("funded"):
            return (f"the funded job {serves['job_id']} it would serve is no longer funded at apply time "
                    f"({row.get('unfunded_reason') or 'not funded'}): not preempted")
        return None

    return check


def _serves_funded(action: Action) -> bool:
    return action.action == PREEMPT and bool((action.serves or {}).get("funded"))
