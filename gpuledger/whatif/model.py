"""The simulator's records: a job of a trace, the knobs of a run, what happened. No I/O.

Times are integer seconds since the trace's origin (``Trace.origin``, naive UTC). GPU counts are
whole-GPU equivalents (a 3g MIG slice on an H100 is 3/7; gpuledger.rules.mig).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from datetime import datetime

PRIORITY = "priority"
SLOT_LIMITS = "slot-limits"
FAIR_SHARE = "fair-share"
RECLAIM = "reclaim"
QUICK = "quick-lane"
POLICIES = (PRIORITY, FAIR_SHARE, RECLAIM)  # gpuledger's three (issue 13), the default run
ALL_POLICIES = (PRIORITY, SLOT_LIMITS, FAIR_SHARE, RECLAIM, QUICK)
BUDGET_MODES = ("config", "fit")  # Params.budgets: as written, or scaled to the replayed cluster
BUDGETS_SAY = {"config": "budgets as the config writes them", "fit": "budgets fitted to the cluster"}  # in titles
POLICY_TITLES = {
    PRIORITY: "1 priority",
    SLOT_LIMITS: "0 team slot limits",
    FAIR_SHARE: "2 budgets + fair share",
    RECLAIM: "3 fair share + squatter reclaim",
    QUICK: "4 reclaim + quick lane",
}


@dataclass(frozen=True)
class SimJob:
    """One job of a trace.

    ``pool``: the inventory pool it runs in (inventory.pool_key: cluster, model, MIG profile or
    None). ``units``: devices of the pool it holds; ``unit_size``: the share of each device
    (1.0 for whole GPUs and MIG instances, 0.46 for a shared GPU). ``gpus``: whole-GPU equivalents
    held (what it is charged). ``work_s``: seconds of running it needs (its recorded runtime).
    ``activity``: activity ratio (0..1) per hour of its own runtime (hour 0 first; past the end
    the last value holds) — from samples where the warehouse has them, else by kind.
    """

    job_id: str
    project: str
    submit_s: int
    work_s: int
    pool: tuple[str, str, str | None]
    units: int
    unit_size: float
    gpus: float
    cluster: str = "sim"
    kind: str | None = None
    name: str | None = None
    namespace: str | None = None
    user_name: str | None = None
    declared_priority: int | None = None
    min_runtime_s: int = 0
    time_limit_s: int | None = None  # the scheduler's limit as recorded (the quick lane's test)
    resumable: bool = False
    activity: tuple[float, ...] = (1.0,)
    activity_source: str = "kind"  # samples / drawn (a donor's samples: never started) / kind
    # where work_s came from: recorded (it ran), drawn:<donor job_id>, declared (its minimum
    # runtime: no job of its kind ran), default (1 h: nor did it declare one)
    work_source: str = "recorded"

    def activity_at(self, progress_s: float) -> float:
        """Activity ratio at ``progress_s`` seconds into its own runtime."""
        i = int(progress_s // 3600)
        return self.activity[i] if i < len(self.activity) else self.activity[-1]

    def active_seconds(self, p0: float, p1: float) -> float:
        """∫ activity over progress [p0, p1) in seconds (GPU-seconds per GPU)."""
        if p1 <= p0:
            return 0.0
        total, t = 0.0, p0
        while t < p1:
            i = int(t // 3600)
            edge = min(p1, (i + 1) * 3600) if i < len(self.activity) else p1
            total += (edge - t) * self.activity_at(t)
            t = edge
        return total


@dataclass(frozen=True)
class Params:
    """The knobs of one run; every one may be swept (compare.sweep). Defaults follow design.md.

    ``cycle_minutes``: how often the enforcement cycle runs (policies 2 and 3). ``queue_head``:
    waiting jobs per pool the cycle weighs (a scheduler's bf_max_job_test); ``backfill_depth``:
    jobs that do not fit the scheduler looks past before it stops filling a pool.
    ``checkpoint_interval_minutes``: a preempted job that resumes loses the work since its last
    checkpoint; one that does not starts over. ``resumable_kinds``: job kinds that checkpoint.
    ``share_overrides``: org node -> raw shares, replacing the config's (a what-if split).
    ``default_min_runtime_hours``: a minimum runtime for jobs that declare none (what if every job
    had to declare one), capped like the declared ones. ``delivery_balance``: 1 credits each
    project's usage with the delivery balance the run still owes it before ranking fair share, 0
    does not (None: the config's policy.usage.delivery_balance.credit_fair_share).
    ``lane_reserve_share``: policy 4's reserve for the quick lane (config.QuickLane.reserve_share).
    ``spare_behind_owed``: demand preemption spares a running job that cannot checkpoint while its
    project is behind what it is owed in the running settlement period (config.EnforcementPolicy).
    ``spare_own_project``: demand preemption never takes a running job of the waiting job's own
    project (config.EnforcementPolicy, rails.own_project_spared).
    ``budgets``: ``config`` funds the config's budgets as written; ``fit`` scales each period's
    budgets to the replayed cluster's capacity, in proportion (policies.fitted_budgets).
    """

    usage_mode: str | None = None  # decay / window; None: the config's
    window_days: float | None = None
    half_life_days: float | None = None
    min_runtime_cap_hours: float | None = None
    idle_threshold_ratio: float | None = None
    cycle_minutes: float = 15.0
    queue_head: int = 8
    backfill_depth: int = 64
    checkpoint_interval_minutes: float = 60.0
    resumable_kinds: tuple[str, ...] = ("training", "fine-tune")
    share_overrides: tuple[tuple[str, float], ...] = ()
    default_min_runtime_hours: float = 0.0  # what if jobs that declare none declared this (0: as recorded)
    # rank fair share on usage less the delivery balance still owed (1) or not (0); None: the config's
    # policy.usage.delivery_balance.credit_fair_share
    delivery_balance: float | None = None
    # policy 4's lane reserve: the share of each pool held for lane jobs and lent meanwhile; None:
    # the config's policy.enforcement.quick_lane.reserve_share
    lane_reserve_share: float | None = None
    # demand preemption spares running jobs that cannot checkpoint of projects behind what they are
    # owed this settlement period (True) or not (False); None: the config's
    # policy.enforcement.spare_behind_owed
    spare_behind_owed: bool | None = None
    # demand preemption never takes a running job of the waiting job's own project (True) or may
    # (False); None: the config's policy.enforcement.spare_own_project
    spare_own_project: bool | None = None
    budgets: str = "config"  # config / fit
    seed: int = 1

    def with_(self, **changes) -> Params:
        return replace(self, **changes)


@dataclass(frozen=True)
class Trace:
    """Jobs and the inventory they ran on; ``origin`` is time 0, ``horizon_s`` the end of the
    replayed range (metrics cover [0, horizon_s))."""

    origin: datetime
    horizon_s: int
    jobs: tuple[SimJob, ...]
    inventory: object  # inventory.Inventory
    skipped: tuple[tuple[str, str], ...] = ()  # (job_id, why) jobs the trace could not replay
    seed: int = 1  # the trace seed of never-started jobs' draws (trace.draw_donor)


@dataclass
class Segment:
    """One stretch a job held GPUs: [start_s, end_s), the devices, progress at both ends."""

    start_s: int
    end_s: int
    devices: tuple[int, ...]
    progress_start_s: float
    progress_end_s: float
    ended_by: str  # done / preempted / squatter-reclaimed / horizon


@dataclass
class JobOutcome:
    job: SimJob
    segments: list[Segment] = field(default_factory=list)
    first_start_s: int | None = None
    done_s: int | None = None
    preemptions: int = 0
    lost_gpu_hours: float = 0.0  # allocated GPU-hours of work thrown away by preemptions
    lost_active_gpu_hours: float = 0.0
    reclaimed: bool = False  # stopped as a squatter
    abandoned: bool = False  # preempted for waiting work, idle through its last grace: not resubmitted
    warnings: int = 0
    # debug jobs: seconds from submission the rules alone kept it waiting (engine._forced_wait), a
    # lower bound on its wait; None for other jobs
    forced_wait_s: int | None = None
    # a session not started within its patience (gpuledger.rules.job_class.SESSION_PATIENCE_S) of
    # its submission, or not restarted within it after a preemption: when its user gave up; it
    # never runs (again)
    given_up_s: int | None = None

    @property
    def stopped_s(self) -> int | None:
        """When the job stopped wanting GPUs: its last segment's end once it is done, reclaimed or
        not resubmitted, or when its user gave up waiting; None while it runs or waits at the run's end."""
        if self.given_up_s is not None:
            return self.given_up_s
        if (self.done_s is not None or self.reclaimed or self.abandoned) and self.segments \
                and self.segments[-1].ended_by != "horizon":
            return self.segments[-1].end_s
        return None


@dataclass
class RunResult:
    """Everything one policy's run produced (metrics.py turns it into figures)."""

    policy: str
    params: Params
    trace: Trace
    outcomes: list[JobOutcome]
    squatted_gpu_hours: float = 0.0
    decide_calls: int = 0
    actions: dict[str, int] = field(default_factory=dict)  # enforce action kind / rule -> count
