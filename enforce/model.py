"""What enforcement decides from and what it decides: plain records, no I/O, no heavy imports.

Times are naive UTC datetimes; GPUs are whole-GPU equivalents (a 3g MIG slice is 3/7).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime

from gpuledger.rules.clock import iso_z

SET_PRIORITY = "set-priority"
WARN = "warn"
PREEMPT = "preempt"
NONE = "none"
HOLD = "hold"  # a team lead holds a queued job (Slurm: scontrol hold; Kueue: spec.active=false)
RELEASE = "release"  # ... and releases it again
REQUEUE = "requeue"
STOP = "stop"
#: A live view's ``phase``, the same words for every scheduler (Slurm's JobState, a pod's phase, a
#: Kueue Workload's conditions): only a ``running`` job holds GPUs a preemption frees, only a
#: ``waiting`` one is served by it; ``held`` (deactivated, suspended) and ``ended`` are neither.
WAITING, RUNNING, HELD, ENDED = "waiting", "running", "held", "ended"
#: Scheduler states after which a job holds nothing (Slurm's JobState, Kubernetes pod phases).
ENDED_STATES = ("COMPLETED", "COMPLETING", "CANCELLED", "FAILED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY",
                "BOOT_FAIL", "DEADLINE", "PREEMPTED", "SUCCEEDED")


@dataclass(frozen=True)
class JobFacts:
    """One job that has not ended: running (``start_time`` set) or waiting for GPUs."""

    cluster: str
    job_id: str
    project: str
    running: bool
    gpus: float
    gpu_model: str | None = None
    name: str | None = None
    namespace: str | None = None
    kind: str | None = None
    source: str | None = None  # kubernetes (a pod) / kueue (a Workload) / slurm / simulator / ...
    user_name: str | None = None
    start_time: datetime | None = None
    submit_time: datetime | None = None
    declared_priority: int | None = None  # the job's own priority (orders only within its project)
    observed_priority: int | None = None  # what the scheduler reports now (Kueue: spec.priority)
    funded: bool = False
    unfunded_reason: str | None = None
    funded_by: str | None = None  # a team lead's funding mark (enforce.team), when that is what funds it
    protected_until: datetime | None = None  # start + capped minimum runtime, funded jobs only
    fs_rank: int | None = None  # the project's fair-share rank, 1 = served first
    labels: dict[str, str] = field(default_factory=dict)
    annotations: dict[str, str] = field(default_factory=dict)
    requeue_flag: bool | None = None  # Slurm's Requeue=1
    scheduler_job: str | None = None  # the scheduler's own name: namespace/pod, namespace/workload/name, JobID
    partition: str | None = None  # Slurm partition (matches an untyped GPU request to its pool)
    qos: str | None = None  # Slurm QOS (exempt_qos)
    time_limit_s: int | None = None  # Slurm TimeLimit / a pod's activeDeadlineSeconds (the quick lane)
    # what the scheduler said about the job when the plan was made (Backend.observe, the fields that
    # identify it and that the decision relied on); None: not observed, so never preempted
    observed: dict | None = None

    def __post_init__(self) -> None:
        # (cluster, job_id), asked millions of times a cycle at Kueue's large shape: a plain
        # attribute (Python 3.11's cached_property takes a lock on each first read)
        object.__setattr__(self, "key", (self.cluster, self.job_id))


@dataclass(frozen=True)
class Finding:
    """A squatting finding for a running job (gpuledger.analytics.squatting)."""

    cluster: str
    job_id: str
    finding: str  # squatting / partial-idle
    severity: str  # info / warning / second-warning / preempt-eligible
    idle_since: datetime
    idle_minutes: float
    gpus_idle: int
    gpus_total: int
    gpu_hours_idle: float = 0.0
    idle_cost: str | None = None  # exact decimal as text, e.g. "25.14"
    currency: str | None = None
    capped: bool = False  # idle for the whole evidence lookback: idle_since is the lookback's start


@dataclass(frozen=True)
class Warning:
    """A warning recorded earlier (enforcement_warnings). ``delivered_at``: when it reached someone
    (the backend warning was applied, or a squatting alert was sent); None: planned only."""

    idle_since: datetime
    stage: str
    warned_at: datetime
    delivered_at: datetime | None = None


@dataclass(frozen=True)
class JobHistory:
    """What enforcement did to a job before (enforcement_job_state)."""

    applied_priority: int | None = None
    declared_priority: int | None = None
    preemptions: int = 0
    last_preempted_at: datetime | None = None
    held: bool = False  # a lead's hold applied on the scheduler (and not released since)


@dataclass(frozen=True)
class Situation:
    """Everything one cycle decides from."""

    now: datetime
    jobs: list[JobFacts]
    findings: list[Finding] = field(default_factory=list)
    warnings: dict[tuple[str, str], list[Warning]] = field(default_factory=dict)
    history: dict[tuple[str, str], JobHistory] = field(default_factory=dict)
    free_gpus: dict[tuple[str, str | None], float] = field(default_factory=dict)  # (cluster, model) -> idle GPUs
    # (cluster, model) -> GPUs with nothing on them; None: unknown (free_gpus serves whole-GPU jobs too)
    free_whole_gpus: dict[tuple[str, str | None], float] | None = None
    fs_projects: int = 0  # projects ranked by fair share (N)
    # projects delivered less than they are owed so far in the running settlement period
    # (analytics.fairshare.delivery's rule); None: not known. policy.enforcement.spare_behind_owed
    # spares their running jobs that cannot checkpoint from demand preemption (rails.spared_behind_owed)
    behind_owed: frozenset[str] | None = None
    # projects whose share of all usage exceeds their global share (sshare's EffectvUsage > NormShares
    # at the root): their exempt jobs queue by fair share instead of on top (exempt_queue)
    over_share: frozenset[str] = frozenset()
    data_as_of: datetime | None = None  # newest sample / job event (stale-data guard, when not per cluster)
    # per cluster: the newest GPU sample (squatting evidence) and job record (demand); when given,
    # a preemption on a cluster needs that cluster's own data fresh
    samples_as_of: dict[str, datetime] | None = None
    jobs_as_of: dict[str, datetime] | None = None
    # preemptions already performed (not dry run): (cluster, job_id, project, when) — rolling caps
    recent_preemptions: list[tuple[str, str, str | None, datetime]] = field(default_factory=list)
    # policy.squatting.exempt_*: hidden from `gpuledger report squatters` (no alert), so never a squatter here
    squatting_exempt: dict = field(default_factory=dict)  # namespaces / kinds / labels
    observed_by: str | None = None  # the backend whose live view joined (None: none, so no preemption)
    observed_cluster: str | None = None  # the cluster that live view is of (None: any)
    # job key -> enforce.team.TeamChoice: what the job's team lead chose (order, funding, hold)
    team_choices: dict = field(default_factory=dict)
    # job key -> enforce.keeps.OwnerChoice: a keep its owner was granted that is still running, or
    # a release the owner asked for (a squatting alert's self-service)
    owner_choices: dict = field(default_factory=dict)


@dataclass
class Action:
    """One planned action. ``reason`` is for the researcher; ``figures`` are the numbers behind it."""

    action: str
    cluster: str
    job_id: str
    project: str | None
    reason: str
    rule: str
    priority: int | None = None
    mode: str | None = None  # preempt: requeue / stop
    funded: bool | None = None
    min_runtime_until: datetime | None = None
    warned_at: datetime | None = None
    dry_run: bool = True
    name: str | None = None
    namespace: str | None = None
    source: str | None = None
    kind: str | None = None
    stage: str | None = None  # warn: the squatting stage warned about
    idle_since: datetime | None = None
    scheduler_job: str | None = None  # namespace/pod for a pod (its job_id may be the pod uid)
    figures: dict = field(default_factory=dict)
    observed: dict | None = None  # preempt / warn: the job as the scheduler showed it at planning (apply re-checks)
    # a preemption for waiting work: the job it serves (job_id, scheduler_job, source, namespace, name,
    # words, observed) — apply checks the scheduler still shows it waiting, unchanged
    serves: dict | None = None
    action_id: str | None = None  # set when the plan is recorded

    def to_json(self) -> dict:
        """The fields as JSON values (times as ISO "Z" text); the dicts are copies, one level deep
        (what they hold is plain: numbers, text, flat dicts of the live view)."""
        out = {}
        for k in self.__dataclass_fields__:
            v = getattr(self, k)
            out[k] = iso_z(v) if isinstance(v, datetime) else {**v} if isinstance(v, dict) else v
        return out

    @classmethod
    def from_json(cls, data: dict) -> Action:
        known = {f for f in cls.__dataclass_fields__}
        unknown = set(data) - known
        if unknown:
            raise ValueError(f"unknown field(s) {sorted(unknown)}")
        values = dict(data)
        for k in ("min_runtime_until", "warned_at", "idle_since"):
            if values.get(k):
                values[k] = datetime.strptime(values[k].rstrip("Z"), "%Y-%m-%dT%H:%M:%S")
        return cls(**values)
