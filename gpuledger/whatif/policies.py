"""The three policies' decisions over the simulator's state, through the live functions:

* funding — :func:`gpuledger.analytics.budget.job_funding` (budget left on the project's path,
  minimum runtime declared and capped), asked again only when a budget runs dry or a period
  turns, since nothing else changes its verdict;
* fair share — :func:`gpuledger.analytics.fairshare.fair_share` over the tracked usage
  (window or half-life, usage.py), every cycle;
* queue order and preemptions — :func:`gpuledger.enforce.policy.target_priorities` and
  :func:`gpuledger.enforce.policy.decide` on a :class:`gpuledger.enforce.model.Situation` built
  from the simulated cluster, the same records the live cycle builds from the warehouse.

Policy 1 (priority) orders by declared priority only and never preempts.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from decimal import ROUND_HALF_UP, Decimal

import polars as pl

from gpuledger.analytics.budget import job_funding
from gpuledger.analytics.fairshare import fair_share, over_share_projects
from gpuledger.analytics.tree import Tree
from gpuledger.config import Config
from gpuledger.enforce.model import Finding, JobFacts, JobHistory, Situation, Warning
from gpuledger.enforce.policy import decide, target_priorities
from gpuledger.enforce.rails import quick_lane
from gpuledger.rules.severity import severity_at
from gpuledger.warehouse.job_columns import job_schema
from gpuledger.whatif.inventory import pool_label
from gpuledger.whatif.model import SimJob


def budget_weights(cfg: Config, at: datetime) -> dict[str, float]:
    """Model -> budget weight in the rate card at ``at`` (the latest entry of any tier; 1.0 when
    the model has none), turning GPU-hours into normalised GPU-hours."""
    out: dict[str, tuple] = {}
    for r in cfg.rate_card:
        when = datetime.combine(r.effective_from, datetime.min.time())
        if when <= at and (r.gpu_model not in out or out[r.gpu_model][0] <= when):
            out[r.gpu_model] = (when, r.budget_weight)
    return {m: w for m, (_, w) in out.items()}


def fitted_budgets(cfg: Config, inventory, at: datetime) -> Config:
    """``cfg`` with each period's budgets scaled, in proportion, so the top budgets of the period
    (those with no budgeted ancestor) sum to the cluster's capacity over it at the dearest model's
    budget weight (Σ device fractions × the period's hours × the cluster's highest weight): the
    example config's own rule at any size — each team's budget funds its share on any model of the
    cluster, so a team within its share stays funded all period and one that bursts runs dry. A
    config written for another cluster size funds a simulated one too little (at 1,024 GPUs the
    example's budgets, written for 256, leave every team unfunded from mid-month) or too much.
    Whole GPU-hours, half up."""
    weights = budget_weights(cfg, at)
    dearest = max((weights.get(d.pool[1], 1.0) for d in inventory.devices), default=1.0)
    per_hour = sum(d.fraction for d in inventory.devices) * dearest
    parent = dict(zip(*cfg.org_frame().select("node", "parent").to_dict(as_series=False).values(), strict=True))
    periods: dict[tuple, list] = defaultdict(list)
    for b in cfg.budgets:
        periods[(b.start, b.end)].append(b)
    scaled = []
    for (start, end), budgets in periods.items():
        budgeted = {b.node for b in budgets}

        def top(node: str, budgeted=budgeted) -> bool:
            up = parent.get(node)
            while up is not None:
                if up in budgeted:
                    return False
                up = parent.get(up)
            return True

        total = sum(b.gpu_hours for b in budgets if top(b.node))
        hours = Decimal((end - start).days * 24)
        k = Decimal(repr(per_hour)) * hours / total if total > 0 else Decimal(0)
        scaled += [b.model_copy(update={"gpu_hours": (b.gpu_hours * k).quantize(Decimal(1), ROUND_HALF_UP)})
                   for b in budgets]
    return cfg.model_copy(update={"budgets": scaled})


@dataclass
class Funding:
    """Budget consumption per project (normalised GPU-hours) and the funded verdict per project."""

    cfg: Config
    origin: datetime
    org_nodes: object  # polars DataFrame
    cap_s: int
    projects: list[str]
    consumed: dict[str, float] = field(default_factory=dict)  # since time 0, per project
    _snap: dict[int, float] = field(default_factory=dict)  # budget index -> subtree consumption at its start
    _key: tuple | None = None
    _verdict: dict[str, tuple[bool, str | None]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.tree = Tree.from_frame(self.org_nodes)
        self.subtree = {
            n: [p for p in self.tree.leaves() if n in self.tree.ancestors(p)] for n in self.tree.parent
        }
        self.budgets = [
            (
                b.node,
                (datetime.combine(b.start, datetime.min.time()) - self.origin).total_seconds(),
                (datetime.combine(b.end, datetime.min.time()) - self.origin).total_seconds(),
                float(b.gpu_hours),
            )
            for b in self.cfg.budgets
        ]

    def _sub(self, node: str) -> float:
        return sum(self.consumed.get(p, 0.0) for p in self.subtree.get(node, ()))

    def remaining(self, t: float) -> dict[str, float]:
        """Node -> remaining normalised GPU-hours of its budget in force at ``t`` (s)."""
        out = {}
        for i, (node, lo, hi, amount) in enumerate(self.budgets):
            if lo <= t < hi:
                if i not in self._snap:  # consumption before the trace's start is unknown: 0
                    self._snap[i] = self._sub(node) if lo > 0 else 0.0
                out[node] = amount - (self._sub(node) - self._snap[i])
        return out

    def verdicts(self, t: float) -> dict[str, tuple[bool, str | None]]:
        """Project -> (budget ok, why not): job_funding's rule, asked again only when it can change."""
        remaining = self.remaining(t)
        key = (tuple(sorted(remaining)), tuple(sorted(n for n, r in remaining.items() if r <= 0)))
        if key != self._key:
            self._key = key
            self._verdict = _job_funding_verdicts(
                self.projects, remaining, self.org_nodes, self.origin + timedelta(seconds=t), self.cap_s
            )
        return self._verdict


def _job_funding_verdicts(projects, remaining, org_nodes, now, cap_s) -> dict[str, tuple[bool, str | None]]:
    burn = pl.LazyFrame(
        {
            "node": list(remaining),
            "remaining_gpu_hours": list(remaining.values()),
            "budget_own": [True] * len(remaining),
        },
        schema={"node": pl.String, "remaining_gpu_hours": pl.Float64, "budget_own": pl.Boolean},
    )
    # one probe job per project that declares a minimum runtime: funded == the budget verdict
    probes = pl.LazyFrame(
        {
            "cluster": ["whatif"] * len(projects),
            "job_id": projects,
            "project": projects,
            "start_time": [None] * len(projects),
            "end_time": [None] * len(projects),
            "min_runtime_s": [1] * len(projects),
        },
        schema=job_schema("cluster", "job_id", "project", "start_time", "end_time", "min_runtime_s"),
    )
    out = job_funding(probes, burn, org_nodes, now=now, min_runtime_cap=timedelta(seconds=max(cap_s, 1)))
    return {
        r["project"]: (bool(r["funded"]), r["unfunded_reason"]) for r in out.collect().iter_rows(named=True)
    }


def fs_ranks(org_nodes, usage: dict[str, float], tree=None) -> tuple[dict[str, int], int, frozenset[str]]:
    """Project -> fair-share rank (1 = served first), the number of ranked projects, and the
    projects over their share (enforce.inputs.over_share)."""
    frame = pl.LazyFrame(
        {"node": list(usage), "u": list(usage.values())}, schema={"node": pl.String, "u": pl.Float64}
    )
    ranked = fair_share(org_nodes, frame, usage_col="u", tree=tree).collect()
    ranks = {n: r for n, r in zip(ranked["node"], ranked["fs_rank"], strict=True) if r is not None}
    return ranks, len(ranks), over_share_projects(ranked.iter_rows(named=True))


def entitled_gpus(org_nodes, tree, capacity_gpus: float) -> dict[str, float]:
    """Project -> the GPUs its global share promises of ``capacity_gpus`` (the rule of
    analytics.fairshare.entitled_hourly, per instant)."""
    none = pl.LazyFrame({"node": [], "u": []}, schema={"node": pl.String, "u": pl.Float64})
    ranked = fair_share(org_nodes, none, usage_col="u", tree=tree).collect()
    leaves = set(tree.leaves())
    return {n: s * capacity_gpus for n, s in zip(ranked["node"], ranked["share_global"], strict=True) if n in leaves}


@dataclass
class JobView:
    """What the cycle knows about a job: enough to build its JobFacts."""

    job: SimJob
    running: bool
    start_s: int | None
    funded: bool
    unfunded_reason: str | None
    protected_until_s: int | None
    fs_rank: int | None


def job_facts(v: JobView, origin: datetime, checkpoint_label: str) -> JobFacts:
    """The enforce record of a simulated job. ``gpus`` counts devices of its pool (a MIG pool's
    instances), ``gpu_model`` names the pool, so demand preemption weighs like against like."""
    j = v.job
    at = lambda s: None if s is None else origin + timedelta(seconds=s)
    return JobFacts(
        cluster=j.cluster,
        job_id=j.job_id,
        project=j.project,
        running=v.running,
        gpus=j.units * j.unit_size,
        gpu_model=pool_label(j.pool),
        name=j.name,
        namespace=j.namespace,
        kind=j.kind,
        source="whatif",
        user_name=j.user_name,
        start_time=at(v.start_s),
        submit_time=at(j.submit_s),
        declared_priority=j.declared_priority,
        funded=v.funded,
        unfunded_reason=v.unfunded_reason,
        protected_until=at(v.protected_until_s),
        fs_rank=v.fs_rank,
        time_limit_s=j.time_limit_s,
        labels={checkpoint_label: "true"} if j.resumable else {},
        observed={},  # the simulator is the scheduler: its live view is the simulated state itself
    )


def lane_eligible(j: SimJob, policy) -> bool:
    """Whether ``j`` is small and short enough for the quick lane (rails.quick_lane, its project's
    budget aside: that is the cycle's verdict)."""
    facts = JobFacts(cluster=j.cluster, job_id=j.job_id, project=j.project, running=False, gpus=j.gpus,
                     kind=j.kind, namespace=j.namespace, funded=True, time_limit_s=j.time_limit_s)
    return quick_lane(facts, policy) is not None


def priority_key(v: JobView) -> tuple:
    """What a job's priority depends on (target_priorities' inputs): its project, funded band,
    exemption (kind, namespace, labels), fair-share rank and declared value."""
    j = v.job
    return (j.cluster, j.project, v.funded, v.fs_rank, j.declared_priority, j.kind, j.namespace, j.resumable)


def priorities(reps: dict[tuple, JobView], fs_projects: int, origin: datetime, policy,
               over: frozenset[str] = frozenset()) -> dict[tuple, int]:
    """priority_key -> the priority enforce would set for jobs of that key. A job's value depends
    only on its key and on the distinct declared values of its project (which the keys hold
    too), so target_priorities runs on one representative per key: the same values, at a
    fraction of the cost."""
    facts = []
    for i, v in enumerate(reps.values()):
        f = job_facts(v, origin, policy.checkpoint_label)
        facts.append(replace(f, job_id=f"rep{i}", running=False, start_time=None, protected_until=None))
    targets = target_priorities(Situation(now=origin, jobs=facts, fs_projects=fs_projects, over_share=over), policy)
    return {k: targets[(f.cluster, f.job_id)][0] for k, f in zip(reps, facts, strict=True)}


def squat_finding(
    job: SimJob,
    *,
    seg_start_s: int,
    progress_start_s: float,
    now_s: int,
    origin: datetime,
    threshold: float,
    squatting,
) -> Finding | None:
    """The squatting finding analytics.squatting would make for a running job at ``now_s``, or None:
    every GPU of a job shares its activity here, so the job squats when it stays under
    ``threshold`` for ``sustained_minutes`` after the start-up grace; severity by the stages."""
    p = progress_start_s + (now_s - seg_start_s)
    if job.activity_at(p) >= threshold:
        return None
    h = int(p // 3600)
    while h > 0 and h * 3600 > progress_start_s and job.activity_at(h * 3600 - 1) < threshold:
        h -= 1
    idle_prog = max(h * 3600, progress_start_s)
    idle_since = seg_start_s + (idle_prog - progress_start_s)
    idle_since = max(idle_since, seg_start_s + squatting.grace_minutes * 60)
    minutes = (now_s - idle_since) / 60
    if minutes < squatting.sustained_minutes:
        return None
    severity = severity_at(minutes, squatting)
    return Finding(
        cluster=job.cluster,
        job_id=job.job_id,
        finding="squatting",
        severity=severity,
        idle_since=origin + timedelta(seconds=idle_since),
        idle_minutes=minutes,
        gpus_idle=job.units,
        gpus_total=job.units,
        gpu_hours_idle=minutes / 60 * job.gpus,
    )


def cycle_actions(
    *,
    origin: datetime,
    now_s: int,
    views: list[JobView],
    findings: list[Finding],
    warnings: dict,
    preemptions: dict[tuple[str, str], int],
    applied: dict[str, int],
    free: dict[tuple[str, str], float],
    free_whole: dict[tuple[str, str], float] | None = None,
    fs_projects: int,
    policy,
    over: frozenset[str] = frozenset(),
    behind: frozenset[str] | None = None,
) -> list:
    """enforce.policy.decide on the simulated situation; its Actions as they are. ``behind``: the
    projects behind what they are owed this settlement period (Situation.behind_owed)."""
    now = origin + timedelta(seconds=now_s)
    facts = [job_facts(v, origin, policy.checkpoint_label) for v in views]
    history = {
        f.key: JobHistory(applied_priority=applied.get(f.job_id), preemptions=preemptions.get(f.key, 0))
        for f in facts
    }
    situation = Situation(
        now=now,
        jobs=facts,
        findings=findings,
        warnings=warnings,
        history=history,
        free_gpus=free,
        free_whole_gpus=free_whole,
        fs_projects=fs_projects,
        over_share=over,
        behind_owed=behind,
        data_as_of=now,
        observed_by="the simulator",
    )
    return decide(situation, policy)


def record_warning(warnings: dict, action, now: datetime) -> None:
    """What the audit would record for a warn action (enforcement_warnings)."""
    warnings.setdefault((action.cluster, action.job_id), []).append(
        # a simulated warning reaches its owner when it is given (as replay counts it)
        Warning(idle_since=action.idle_since, stage=action.stage, warned_at=now, delivered_at=now)
    )
