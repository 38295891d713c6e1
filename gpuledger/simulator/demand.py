"""Demand as Ai2 describes its cluster: a standing backlog, not an arrival rate above capacity.

Each project's users keep about ``BACKLOG_FACTOR`` times the project's share of the cluster's GPUs
outstanding (running or queued). Every ``TOP_UP_S`` they look at their queue and submit more when
it is short (closed loop: a project whose jobs start submits more; one whose queue is long waits).
The target follows the day and the week (``rhythm``) and the project's season (a quiet week lends
GPUs to the others, a deadline week wants more), as the demand regime sets it (``REGIMES``:
``ai2-backlog``, the default, draws mild seasons week by week; ``ai2-seasonal`` runs every team
through a deadline cycle at its own phase). What users submit, by project keyword
(``plan_for``): training chains (a long run in checkpointed segments, each resuming where the last
stopped), fine-tunes, batch evals, short debug jobs, notebook sessions, production inference
replicas and MIG inference services sized to the MIG devices that exist. Sessions and production
replicas are not a backlog: sessions are opened at the day's rhythm and given up when they do not
start; replicas follow traffic (``Demand.serving_gpus``). A share of notebook sessions (and a few
debug allocations) is left idle holding its GPUs: the squatters, named ``squat-...``.

Training and fine-tunes checkpoint (every 30-60 min: signals.py draws the dips) and can be
requeued: a chain's segment resumes where the last stopped, and both are Slurm jobs of kinds in
``policy.whatif.resumable_kinds``, as a site submits them with ``--requeue`` (the Requeue=1 that
``enforce plan --observe slurm`` reads, enforce/rails.py ``resumable``); evals, debug jobs,
sessions and services do not.

Declared priorities are inflated (most jobs say high) and minimum runtimes follow design.md's
funding rule: training and inference the 8 h cap, a fine-tune (it checkpoints) up to 2 h, evals,
debug jobs and sessions (they do not checkpoint) their whole runtime, squatters none.
"""

from __future__ import annotations

import bisect
import itertools
import zlib
from dataclasses import dataclass

import numpy as np

from gpuledger.config import Config
from gpuledger.rules import job_class
from gpuledger.rules.mig import mig_fraction
from gpuledger.simulator import pools
from gpuledger.simulator.cluster import GPUS_PER_NODE
from gpuledger.simulator.defaults import REGIME_NAMES
from gpuledger.simulator.noise import SALT, uniform
from gpuledger.simulator.specs import (
    BATCH,
    FAILING,
    FINE_TUNE,
    INFERENCE,
    INTERACTIVE,
    PRIORITY_HIGH,
    PRIORITY_LOW,
    PRIORITY_NORMAL,
    SQUAT,
    TRAINING,
    JobSpec,
)

REGIME, SEASONAL = REGIME_NAMES  # the default (figures name the regime beside the seed), strong seasons
BACKLOG_FACTOR = 2.5  # outstanding GPUs ÷ the project's share of GPUs (Ai2: 2-3x outstanding requests)
TOP_UP_S = 600  # users look at their queue every 10 minutes
MIN_RUNTIME_CAP_S = 8 * 3600
WEEK_ORIGIN_S = 1_577_664_000  # Monday 2019-12-30 00:00 UTC: seasons are calendar weeks
WEEK_S = 7 * 86400
# Seasons per (project, calendar week): a quiet week wants less than its share (it lends), a
# deadline week more. Regime ai2-backlog, chosen, not measured: about one project in seven quiet,
# one in five at a deadline, drawn week by week.
QUIET, NORMAL, DEADLINE, EXPLORING = "quiet", "normal", "deadline", "exploring"
SEASON_FACTOR = {QUIET: 0.3, NORMAL: 1.0, DEADLINE: 1.5}
QUIET_BELOW, DEADLINE_FROM = 0.15, 0.8
# Regime ai2-seasonal: Ai2's teams work to deadlines (its post: 18 % of delivered time beyond a
# team's allocation, "feels like 30 % more compute" — GPUs that teams between deadlines did not use,
# lent to those at one). Each project runs a four-week cycle: a deadline week, a week of write-up and
# exploring at small scale (the deadline's queue drains), a quiet week, a normal week building up to
# the next deadline. The projects, in an order drawn per seed, take phases 0, 1, 2, 3, 0, ... so
# deadlines fall at different times and every week two or three teams of nine are quiet. A team's
# multi-node training chains run on through its seasons (a pretraining run does not stop for a quiet
# week; they hold ~60 % of a chain team's whole-GPU share); the season moves what its users submit
# besides. Chosen, not measured (Ai2 publishes no per-team seasons): a quiet team's users keep ~0.25x
# its share outstanding (0.1 x 2.5), a deadline team's ~4x; an exploring week ~1x, lending at night.
SEASONAL_CYCLE = (DEADLINE, EXPLORING, QUIET, NORMAL)
SEASONAL_FACTOR = {DEADLINE: 1.6, QUIET: 0.1, EXPLORING: 0.4, NORMAL: 1.0}
# Squatting as a behaviour. Assumption, not a measurement: one notebook session in ten is left
# idle with its memory held until its session limit (4-12 h), and one debug allocation in a
# hundred (an `salloc` left open). Sources say idle-held GPUs are common but publish no share of
# sessions: NVIDIA's study of its research clusters ("Making GPU clusters more efficient with
# NVIDIA data center monitoring", 2025) ranks "jobs occupy GPUs but don't use them" as of moderate
# frequency; Princeton Research Computing kills jobs at 0 % GPU utilization after 2 h, with two
# warnings (its utilization policy, Nov 2023), because they recur. With these shares squatters
# hold about 1 % of the cluster's GPU-hours (BENCHMARKS.md, "Simulator"). A session on a
# time-sliced GPU is never left idle here: its neighbour's work hides it from per-GPU data, so it
# could not be ground truth for the squatting rules.
SQUAT_SHARE_SESSIONS = 0.10
SQUAT_SHARE_DEBUG = 0.01
DEBUG_TIME_LIMIT_S = 1800  # debug jobs are submitted with a 30-min limit (a debug partition's MaxTime)
# A notebook team's users open sessions worth its share of the cluster at the day's rhythm (so it
# lends its GPUs at night and in quiet weeks and wants more at a deadline), and keep a short queue
# of debug jobs besides (0.05 x BACKLOG_FACTOR x its share outstanding: one or two at 256 GPUs).
# Chosen, not measured.
SESSION_OFFER = 0.7
SESSION_TEAM_BACKLOG = 0.05
# Production inference sized to traffic (issue 34: a standing backlog of exempt replicas at 2.5x
# its share kept serving's replicas waiting hours, and what started ran above the team's share,
# never preempted, taking the hours other teams were owed). A serving team's replicas take 0.7 of
# its share x the day's rhythm (0.8 at the afternoon peak; it lends the rest, more at night and at
# weekends); a ranking team serves its models with 0.4 of its share x the rhythm and runs
# evaluations besides. Its engineers keep a short queue of debug jobs (as a notebook team's).
# Chosen, not measured.
SERVING_OFFER = 0.7
RANKING_SERVING = 0.4
SERVING_TEAM_BACKLOG = 0.02
PLANTED_SQUATTERS = 4  # ground truth for tests and demos at any size (Demand._planted_squatters)
FAIL_SHARE = {"fine-tune": 0.05, "batch": 0.08}
# Inflated priorities: share of jobs that say high / normal / low.
PRIORITY_DRAW = ((PRIORITY_HIGH, 0.7), (PRIORITY_NORMAL, 0.2), (PRIORITY_LOW, 0.1))


@dataclass(frozen=True)
class Plan:
    """What a project's users run: training chains (yes/no), MIG services (yes/no) and the
    job-count weights of what they submit when topping up their queue."""

    chains: bool
    mig_services: bool
    mix: dict[str, float]
    # Notebook sessions are not a backlog: users open them when they sit down and give up on one
    # that has not started in SESSION_PATIENCE_S. ``sessions``: the GPUs they open, as a share of
    # the project's share of the cluster (x the day's rhythm and the season), arriving apart from
    # the closed loop; ``backlog``: the factor on the loop's target for the rest of the mix.
    sessions: float = 0.0
    backlog: float = 1.0
    # Production inference is not a backlog either: its replicas follow traffic. ``serving``: the
    # GPUs its replicas (MIG services included) take, as a share of the project's share of the
    # cluster, x the day's rhythm (traffic keeps no research seasons); the loop tops them up to it.
    serving: float = 0.0


_PLANS = (
    (("pretrain",), Plan(True, False, {"fine-tune": 0.25, "batch": 0.4, "debug": 0.35})),
    (("posttrain", "finetune", "fine-tune", "rl"), Plan(True, False, {"fine-tune": 0.4, "batch": 0.3, "debug": 0.3})),
    (("gen", "train"), Plan(True, False, {"fine-tune": 0.35, "batch": 0.3, "debug": 0.35})),
    (("eval", "ci", "test"), Plan(False, False, {"batch": 0.7, "debug": 0.3})),
    (("serving", "inference", "serve"), Plan(False, True, {"debug": 1.0}, backlog=SERVING_TEAM_BACKLOG,
                                             serving=SERVING_OFFER)),
    (("ranking", "search", "recsys"), Plan(False, False, {"batch": 0.6, "debug": 0.4}, serving=RANKING_SERVING)),
    (("notebook", "interactive", "dev"), Plan(False, False, {"debug": 1.0}, sessions=SESSION_OFFER,
                                              backlog=SESSION_TEAM_BACKLOG)),
)
_DEFAULT_PLAN = Plan(True, False, {"fine-tune": 0.35, "batch": 0.35, "debug": 0.3})


def plan_for(project: str) -> Plan:
    """A project's plan, from keywords in its name."""
    lowered = project.lower()
    for words, plan in _PLANS:
        if any(w in lowered for w in words):
            return plan
    return _DEFAULT_PLAN


def global_shares(cfg: Config) -> dict[str, float]:
    """Each leaf project's share of the whole cluster: product of normalised shares on its path."""
    out: dict[str, float] = {}

    def walk(node, share):
        if not node.children:
            out[node.name] = share
            return
        total = sum(c.shares for c in node.children)
        for child in node.children:
            walk(child, share * child.shares / total)

    walk(cfg.org, 1.0)
    return out


def rhythm(t: int) -> float:
    """How much of their backlog users keep at epoch second ``t``: more in the (UTC) afternoon,
    less at night and at weekends."""
    hour = (t % 86400) / 3600
    day = 1.0 + 0.15 * np.cos(2 * np.pi * (hour - 15.0) / 24.0)
    weekday = ((t - WEEK_ORIGIN_S) // 86400) % 7  # 0 = Monday
    return float(day * (0.85 if weekday >= 5 else 1.0))


def week_of(t: int) -> int:
    """The calendar week (Monday 00:00 UTC to Monday) of epoch second ``t``, counted from WEEK_ORIGIN_S."""
    return (t - WEEK_ORIGIN_S) // WEEK_S


def season(seed: int, project: str, t: int) -> str:
    """Regime ai2-backlog: the project's season in the calendar week of ``t`` (quiet / normal /
    deadline), drawn per (project, week)."""
    u = float(uniform(seed, SALT["season"], zlib.crc32(project.encode()), week_of(t)))
    return QUIET if u < QUIET_BELOW else DEADLINE if u >= DEADLINE_FROM else NORMAL


def cycle_phases(seed: int, projects: list[str], length: int) -> dict[str, int]:
    """Regime ai2-seasonal: each project's phase in the cycle of ``length`` weeks. The projects, in
    an order drawn per seed, take phases 0, 1, ..., length - 1, 0, ... (deadlines at different times)."""
    order = sorted(projects, key=lambda p: (float(uniform(seed, SALT["season"], zlib.crc32(p.encode()))), p))
    return {p: k % length for k, p in enumerate(order)}


@dataclass(frozen=True)
class Regime:
    """A demand regime: how a project's season is set week by week, and the factor each season puts
    on what its users keep outstanding. ``cycle`` empty: seasons drawn per (project, week) (season());
    else the seasons in turn, one a calendar week, each project at its phase (cycle_phases())."""

    name: str
    factor: dict[str, float]
    cycle: tuple[str, ...] = ()


REGIMES = {r.name: r for r in (Regime(REGIME, SEASON_FACTOR), Regime(SEASONAL, SEASONAL_FACTOR, SEASONAL_CYCLE))}


def regime_named(name: str) -> Regime:
    """The regime called ``name``; a ValueError naming the choices for any other name."""
    try:
        return REGIMES[name]
    except KeyError:
        raise ValueError(f"no demand regime {name!r}: choose {' or '.join(REGIMES)} (the default {REGIME})") from None


class Demand:
    """The projects' users: what they submit at the start, at each top-up, and when a training
    segment ends. Deterministic for (seed, hardware, config, window, regime)."""

    def __init__(self, cfg: Config, placer: pools.Placer, seed: int, rng: np.random.Generator,
                 start_s: int, end_s: int, regime: str = REGIME):
        self.seed, self.rng, self.start_s, self.end_s = seed, rng, start_s, end_s
        self.regime = regime_named(regime)
        self.shares = global_shares(cfg)
        self.projects = sorted(self.shares)
        self.phases = cycle_phases(seed, self.projects, len(self.regime.cycle)) if self.regime.cycle else {}
        self.plans = {p: plan_for(p) for p in self.projects}
        cap = placer.capacity
        self.whole_pools = sorted(p for p in cap if p.startswith("whole:"))
        self.whole_total = sum(cap[p] for p in self.whole_pools)
        self.capacity_gpus = sum(c * self.gpus_per_lane(p) for p, c in cap.items())
        self.session_pools = self._session_pools(cap)
        self.has_shared = pools.SHARED in cap
        # the slices and shared GPUs a session or debug job may take (besides any whole GPU)
        self.small_pools = self.session_pools + ([pools.SHARED] if self.has_shared else [])
        self.capacity = cap
        self.placer = placer  # what is free now: users see free GPUs before they submit (_choose)
        self.serial = 0
        self.session_credit: dict[str, float] = {}  # GPU-seconds of sessions owed to the next top-up

    @staticmethod
    def gpus_per_lane(pool: str) -> float:
        if pool == pools.SHARED:
            return 0.5
        if pool.startswith("mig:"):
            return mig_fraction(pool[4:], "H100")  # MIG nodes are H100 (cluster.build_hardware)
        return 1.0

    def _service_projects(self) -> list[str]:
        return [p for p in self.projects if self.plans[p].mig_services]

    def _session_pools(self, cap: dict[str, int]) -> list[str]:
        """MIG pools notebook sessions and debug jobs use: the small profiles (1g, 2g), every
        profile when no project runs MIG services."""
        migs = sorted(p for p in cap if p.startswith("mig:"))
        if self._service_projects():
            return [p for p in migs if p[4] in "12"]
        return migs

    # --- the window's first jobs ---

    def initial(self) -> list[JobSpec]:
        """Training chains' first segments and the MIG inference services, submitted at the start,
        and the planted squatters, submitted later in the window."""
        return self._chains() + self._mig_services() + self._planted_squatters()

    def _planted_squatters(self) -> list[JobSpec]:
        """Ground truth even in a small or short window, beside the behaviour (which scales with
        the sessions): ``PLANTED_SQUATTERS`` allocations left idle, submitted between 2 % and 60 %
        of the window, the first of a whole node once there are 32 whole GPUs, the last 4 h before
        the window ends (so "now" has one) when the window is over 6 h."""
        span = self.end_s - self.start_s
        out = []
        for k in range(PLANTED_SQUATTERS):
            project = self.projects[int(self.rng.integers(0, len(self.projects)))]
            pool = self.whole_pools[k % len(self.whole_pools)]
            count = GPUS_PER_NODE if k == 0 and self.whole_total >= 32 else 1
            submit = self.start_s + int(self.rng.uniform(0.02, 0.6) * span)
            if k == PLANTED_SQUATTERS - 1 and span > 6 * 3600:
                submit = self.end_s - 4 * 3600
            user = self._users(project)[k % 4]
            # an interactive allocation left open (a session, an salloc): ground truth that must
            # run, so its user opens it when its GPUs are free (opens_when_free) and it starts at
            # once, within any patience; a replay gives it the patience of its kind
            spec = JobSpec(project, user, "", "interactive", SQUAT, pool, count, 0, submit, PRIORITY_HIGH, 0, "k8s",
                           opens_when_free=True)
            out.append(self._squatter(spec, self._next()))
        return out

    def _chains(self) -> list[JobSpec]:
        """One chain per 8-64 GPUs of 60 % of a chain project's share of whole GPUs (one of 8 GPUs
        when that is less than a node but the share is a node or more), never more than half of a
        pool in chains."""
        room = {p: self.capacity[p] // 2 for p in self.whole_pools}
        out, chain = [], 0
        for project in self.projects:
            if not self.plans[project].chains:
                continue
            owned = self.shares[project] * self.whole_total
            budget = 0.6 * owned if 0.6 * owned >= GPUS_PER_NODE else GPUS_PER_NODE if owned >= GPUS_PER_NODE else 0
            while budget >= GPUS_PER_NODE:
                size = max(s for s in (64, 32, 16, 8) if s <= budget)
                pool = max(room, key=lambda p: (room[p], p)) if room else None
                if pool is None or room[pool] < GPUS_PER_NODE:
                    break
                size = min(size, room[pool] // GPUS_PER_NODE * GPUS_PER_NODE)
                room[pool] -= size
                budget -= size
                out.append(self._segment(project, pool, size, chain, 0, self.start_s))
                chain += 1
        return out

    def _segment(self, project: str, pool: str, size: int, chain: int, number: int, at: int) -> JobSpec:
        return JobSpec(project, self._users(project)[chain % 4], f"{project}-run{chain}-{number}", "training",
                       TRAINING, pool, size, int(self.rng.uniform(18, 60) * 3600), at, PRIORITY_HIGH,
                       MIN_RUNTIME_CAP_S, "slurm", chain=chain, gpus=float(size))

    def next_segment(self, done: JobSpec, at: int) -> JobSpec:
        """The chain's next segment, submitted when ``done`` ends: it resumes from the checkpoint."""
        number = int(done.name.rsplit("-", 1)[1]) + 1
        return self._segment(done.project, done.pool, done.count, done.chain, number, at)

    def _mig_services(self) -> list[JobSpec]:
        """One service per MIG device of the large profiles (3g, 4g, 7g) and per second device of
        the small ones; the rest of the small ones is for sessions. Shared among the serving
        projects by share. Services were up before the window and run through it: they are placed
        at its first instant, before any top-up (whose jobs come a second or more later)."""
        serving = self._service_projects()
        if not serving:
            return []
        total_share = sum(self.shares[p] for p in serving)
        credit = {p: 0.0 for p in serving}
        out = []
        for pool in sorted(p for p in self.capacity if p.startswith("mig:")):
            n = self.capacity[pool] if pool not in self.session_pools else self.capacity[pool] // 2
            for _ in range(n):
                for p in serving:
                    credit[p] += self.shares[p] / total_share
                project = max(serving, key=lambda p: (credit[p], p))
                credit[project] -= 1
                k = self._next()
                out.append(JobSpec(project, self._users(project)[k % 4], f"{project}-svc-{k}", "inference",
                                   INFERENCE, pool, 1, self.end_s - self.start_s + 86400,
                                   self.start_s, PRIORITY_HIGH,
                                   MIN_RUNTIME_CAP_S, "k8s", gpus=self.gpus_per_lane(pool)))
        return out

    # --- the closed loop ---

    def season(self, project: str, t: int) -> str:
        """The project's season in the calendar week of ``t``, as the regime sets it."""
        cycle = self.regime.cycle
        if not cycle:
            return season(self.seed, project, t)
        return cycle[(week_of(t) + self.phases[project]) % len(cycle)]

    def target_gpus(self, project: str, t: int) -> float:
        """GPUs the project's users want outstanding (running or queued) at ``t``."""
        return (self.shares[project] * self.capacity_gpus * BACKLOG_FACTOR * self.plans[project].backlog
                * rhythm(t) * self.regime.factor[self.season(project, t)])

    def serving_gpus(self, project: str, t: int) -> float:
        """GPUs the project's production replicas take at ``t``: they follow traffic."""
        return self.shares[project] * self.capacity_gpus * self.plans[project].serving * rhythm(t)

    @staticmethod
    def serves(spec: JobSpec) -> bool:
        """Whether ``spec`` is a production replica (counted against serving_gpus, not the backlog)."""
        return spec.behaviour == INFERENCE

    def sessions(self, t: int, load: dict[str, int], open_sessions: dict[str, int]) -> list[JobSpec]:
        """Notebook sessions opened over the next ``TOP_UP_S``, outside the loop: per project, GPU-
        seconds worth its plan's ``sessions`` x share x rhythm x season, carried over between top-
        ups (a session counts its GPUs x duration). ``load`` and ``open_sessions`` (sessions running
        or waiting per pool) are updated."""
        out = []
        for project in self.projects:
            offer = self.plans[project].sessions
            if not offer:
                continue
            self.session_credit[project] = self.session_credit.get(project, 0.0) + (
                offer * self.shares[project] * self.capacity_gpus * rhythm(t)
                * self.regime.factor[self.season(project, t)] * TOP_UP_S)
            while self.session_credit[project] > 0:
                spec = self._session(project, t + int(self.rng.integers(1, TOP_UP_S)), load, open_sessions)
                self.session_credit[project] -= spec.gpus * spec.duration_s
                load[spec.pool] = load.get(spec.pool, 0) + spec.count
                open_sessions[spec.pool] = open_sessions.get(spec.pool, 0) + spec.count
                out.append(spec)
        return sorted(out, key=lambda spec: spec.submit_s)

    def top_up(self, t: int, outstanding: dict[str, float], load: dict[str, int],
               serving: dict[str, float]) -> list[JobSpec]:
        """New jobs from every project whose outstanding GPUs are under its target at ``t``, and
        production replicas where they are under traffic's (``serving``: replicas' GPUs per
        project), submitted over the next ``TOP_UP_S``. ``outstanding`` (GPUs per project, replicas
        apart), ``serving`` and ``load`` (lanes running or queued per pool) are updated."""
        out = []
        for project in self.projects:
            for kept, want, template in ((serving, self.serving_gpus(project, t), "inference"),
                                         (outstanding, self.target_gpus(project, t), None)):
                for _ in range(1000):  # a bound, never reached: a job is at least a MIG slice
                    if kept.get(project, 0.0) >= want:
                        break
                    spec = self._job(project, t + int(self.rng.integers(1, TOP_UP_S)), load, template)
                    kept[project] = kept.get(project, 0.0) + spec.gpus
                    load[spec.pool] = load.get(spec.pool, 0) + spec.count
                    out.append(spec)
        return out

    def _choose(self, candidates: list[str], load: dict[str, int], count: int, *, drawn: int = 2) -> str:
        """Where a user submits a job of ``count`` lanes: of ``drawn`` pools drawn by size (lanes),
        one where a job of fewer than 8 GPUs fits now (free GPUs on a node: the scheduler backfills
        it there whatever waits for whole nodes), else the one with the least running and queued
        work for its size. Users look at the queues and free GPUs (sinfo, the Kueue dashboard)
        before they submit; the rest of the pick is habit. One-GPU work, which runs anywhere, looks
        at every pool (``drawn=0``)."""
        if drawn:
            sizes = [self.capacity[p] for p in candidates]
            candidates = [self._pick(candidates, sizes) for _ in range(drawn)]
        fits = (lambda p: self.placer.fits(p, count)) if count < GPUS_PER_NODE else (lambda p: False)
        return min(candidates, key=lambda p: (not fits(p), load.get(p, 0) / self.capacity[p], self.rng.random()))

    def _pick(self, items: list, weights: list[float]):
        """One of ``items`` drawn with probability in proportion to ``weights``."""
        total = sum(weights)
        return items[min(bisect.bisect_right(list(itertools.accumulate(weights)), self.rng.random() * total),
                         len(items) - 1)]

    def _job(self, project: str, submit: int, load: dict[str, int], template: str | None = None) -> JobSpec:
        """A job of the project's mix (``template`` None: drawn by its weights), or of ``template``."""
        rng = self.rng
        if template is None:
            mix = self.plans[project].mix
            names = sorted(mix)
            template = self._pick(names, [mix[n] for n in names])
        user = self._users(project)[int(rng.random() * 4)]
        priority = self._priority()
        k = self._next()
        count = (GPUS_PER_NODE if template == "fine-tune" or rng.random() < 0.25 else 1) \
            if template in ("fine-tune", "batch", "inference") else 1
        whole = self._choose(self.whole_pools, load, count) if template in ("fine-tune", "batch", "inference") else ""
        if template == "fine-tune":
            dur = int(rng.uniform(1.5, 10) * 3600)
            spec = JobSpec(project, user, f"{project}-ft-{k}", "fine-tune", FINE_TUNE, whole, count, dur,
                           submit, priority, min(dur, 2 * 3600), "slurm")
        elif template == "batch":
            dur = int(rng.uniform(0.3, 1.8) * 3600)
            # no checkpoints: preempted, it starts over, so it declares its whole runtime
            spec = JobSpec(project, user, f"{project}-eval-{k}", "batch", BATCH, whole,
                           count, dur, submit, priority, dur, "k8s")
        elif template == "inference":
            spec = JobSpec(project, user, f"{project}-serve-{k}", "inference", INFERENCE, whole,
                           count, int(rng.uniform(4, 24) * 3600), submit, priority,
                           MIN_RUNTIME_CAP_S, "k8s")
        elif template == "debug":
            dur = int(rng.uniform(3, 25) * 60)
            spec = JobSpec(project, user, f"dbg-{user}-{k}", "batch", BATCH, self._choose(self.whole_pools + self.small_pools, load, 1, drawn=0), 1, dur,
                           submit, PRIORITY_HIGH, dur, "k8s", debug=True, time_limit_s=DEBUG_TIME_LIMIT_S)
            if rng.random() < SQUAT_SHARE_DEBUG and spec.pool != pools.SHARED:
                return self._squatter(spec, k)
        else:
            raise ValueError(f"no job template {template!r}")
        if rng.random() < FAIL_SHARE.get(template, 0.0):
            spec.behaviour, spec.duration_s, spec.name = FAILING, int(rng.uniform(60, 600)), spec.name + "-fail"
        spec.gpus = spec.count * self.gpus_per_lane(spec.pool)
        return spec

    def _session(self, project: str, submit: int, load: dict[str, int], sessions: dict[str, int]) -> JobSpec:
        """A notebook session (its user at the keyboard for all of it), on the pool with the fewest
        sessions open for its size (``sessions``: lanes per pool; the policy starts a session
        before its team's other work, so other sessions are what it waits behind); one in ``1 / SQUAT_SHARE_SESSIONS`` is left idle (a squatter)."""
        rng = self.rng
        user = self._users(project)[int(rng.random() * 4)]
        priority, k = self._priority(), self._next()
        dur = int(rng.uniform(0.5, 6) * 3600)
        small = [p for p in self.small_pools if load.get(p, 0) < self.capacity[p]]
        pool = (min(small, key=lambda p: (load.get(p, 0) / self.capacity[p], self.rng.random())) if small else
                min(self.whole_pools, key=lambda p: (sessions.get(p, 0) / self.capacity[p], self.rng.random())))
        spec = JobSpec(project, user, f"nb-{user}-{k}", "interactive", INTERACTIVE, pool,
                       1, dur, submit, priority, dur, "k8s")
        spec.patience_s = job_class.patience_s(spec.kind)
        if rng.random() < SQUAT_SHARE_SESSIONS and spec.pool != pools.SHARED:
            return self._squatter(spec, k)
        spec.gpus = spec.count * self.gpus_per_lane(spec.pool)
        return spec

    def _squatter(self, spec: JobSpec, k: int) -> JobSpec:
        """The session (or debug allocation: kind batch) left idle, memory held, until its 4-12 h limit; it declares
        no minimum runtime (never funded, never protected)."""
        spec.name, spec.behaviour = f"squat-{spec.project}-{k}", SQUAT  # its kind stays: a session, or a debug allocation
        spec.duration_s, spec.min_runtime_s, spec.debug = int(self.rng.uniform(4, 12) * 3600), 0, False
        spec.time_limit_s = spec.duration_s  # the session limit it runs into
        spec.gpus = spec.count * self.gpus_per_lane(spec.pool)
        return spec

    def _priority(self) -> int:
        u, acc = self.rng.random(), 0.0
        for value, share in PRIORITY_DRAW:
            acc += share
            if u < acc:
                return value
        return PRIORITY_DRAW[-1][0]

    def _next(self) -> int:
        self.serial += 1
        return self.serial

    @staticmethod
    def _users(project: str) -> list[str]:
        return [f"{project.split('-')[0][:6]}-user{u}" for u in range(1, 5)]
