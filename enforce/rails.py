"""The judgments every enforcement stage shares: exemptions, protection, resumability, lost work,
the stale-data guard, the live-view and cool-down rails, and how an Action is made. Pure: no I/O,
no clock (``now`` comes from the Situation)."""

from __future__ import annotations

from datetime import datetime, timedelta

from gpuledger.enforce.model import PREEMPT, REQUEUE, STOP, WARN, Action, JobFacts, Situation

TRUE = ("true", "1", "yes", "enabled")


def fmt(t: datetime | None) -> str:
    return "-" if t is None else f"{t:%Y-%m-%d %H:%M}Z"


def gpus(x: float) -> str:
    """A GPU count as people read it: to 3 decimals (a MIG slice of 1/7 is 0.143), float sums'
    noise gone (2/7 - 2/7 left as 2.8e-14 reads 0; -0.0 reads 0)."""
    return f"{round(x, 3) + 0.0:g}"


def exemption(job: JobFacts, policy) -> str | None:
    """Why the job may never be preempted (and sits on top), or None."""
    if job.namespace and job.namespace in policy.exempt_namespaces:
        return f"namespace {job.namespace} is exempt"
    if job.kind and job.kind in policy.exempt_kinds:
        return f"kind {job.kind} is exempt (production inference is never preempted)"
    for key, value in policy.exempt_labels.items():
        if job.labels.get(key) == value:
            return f"label {key}={value} is exempt"
    if str(job.source or "").startswith("slurm"):  # Slurm's own names for who runs what
        if job.project in policy.exempt_accounts:
            return f"account {job.project} is exempt (policy.enforcement.exempt_accounts)"
        if job.user_name and job.user_name in policy.exempt_users:
            return f"user {job.user_name} is exempt (policy.enforcement.exempt_users)"
        if job.qos and job.qos in policy.exempt_qos:
            return f"QOS {job.qos} is exempt (policy.enforcement.exempt_qos)"
    return None


def quick_lane(job: JobFacts, policy) -> str | None:
    """Why the job belongs in the quick lane (policy.enforcement.quick_lane), or None: small
    (at most ``max_gpus``) and short by its kind or its time limit, with budget left (a job
    unfunded only for declaring no minimum runtime still has its project's budget behind it)."""
    lane = getattr(policy, "quick_lane", None)
    if lane is None or not lane.enabled or job.gpus > lane.max_gpus + 1e-9:
        return None
    if not job.funded and job.unfunded_reason not in (None, "no minimum runtime declared"):
        return None
    if job.kind and job.kind in lane.kinds:
        short = f"kind {job.kind}"
    elif job.time_limit_s is not None and 0 < job.time_limit_s <= lane.max_minutes * 60:
        short = f"time limit {job.time_limit_s // 60} min"
    else:
        return None
    return f"quick lane: {gpus(job.gpus)} GPU, {short} (at most {gpus(lane.max_gpus)} GPU, {lane.max_minutes:g} min)"


def squatting_exemption(job: JobFacts, situation: Situation) -> str | None:
    """Why ``gpuledger report squatters`` hides the job (policy.squatting.exempt_*): no alert ever reached
    its owner, so it is never warned or preempted as a squatter either — one set of exemptions."""
    ex = situation.squatting_exempt or {}
    if job.namespace and job.namespace in (ex.get("namespaces") or ()):
        return f"namespace {job.namespace} is exempt from squatting (policy.squatting.exempt_namespaces)"
    if job.kind and job.kind in (ex.get("kinds") or ()):
        return f"kind {job.kind} is exempt from squatting (policy.squatting.exempt_kinds)"
    for key, value in (ex.get("labels") or {}).items():
        if job.labels.get(key) == value:
            return f"label {key}={value} is exempt from squatting (policy.squatting.exempt_labels)"
    return None


def resumable(job: JobFacts, policy) -> bool:
    """The job declares it can resume from a checkpoint, so a preemption requeues it."""
    return (str(job.labels.get(policy.checkpoint_label, "")).lower() in TRUE
            or str(job.annotations.get(policy.checkpoint_annotation, "")).lower() in TRUE
            or bool(job.requeue_flag))


def protected(job: JobFacts, now: datetime) -> bool:
    """Funded and inside its minimum runtime: never preempted."""
    return bool(job.funded and job.protected_until is not None and now < job.protected_until)


def spared_behind_owed(job: JobFacts, situation: Situation, policy) -> str | None:
    """Why demand preemption spares the job (``policy.spare_behind_owed``), or None: it cannot
    checkpoint (not :func:`resumable`, so a preemption throws away all its work) and its project
    is behind what it is owed in the running settlement period — delivered so far < owed so far,
    the rule of analytics.fairshare.delivery (owed = min(entitled, demand) hour by hour, delivered =
    min(allocated, owed) per period), given as ``situation.behind_owed``. Squatter reclaim is
    not held by it: an idle session is reclaimed whatever its project is owed."""
    if not getattr(policy, "spare_behind_owed", False) or situation.behind_owed is None:
        return None
    if job.project not in situation.behind_owed or resumable(job, policy):
        return None
    return (f"its project {job.project} is behind what it is owed this settlement period and the job "
            "cannot checkpoint (policy.enforcement.spare_behind_owed): it is spared")


def spares_own_project(policy) -> bool:
    """``policy.spare_own_project``: demand preemption never takes a running job of the waiting
    job's own project (:func:`own_project_spared`)."""
    return bool(getattr(policy, "spare_own_project", False))


def own_project_spared(job: JobFacts, waiting: JobFacts, policy) -> bool:
    """Whether demand preemption may not take ``job`` for ``waiting`` (``policy.spare_own_project``):
    they are of the same project. The project's allocation is the same either way — its GPUs go
    from one of its jobs to another — so the preemption would only throw away the running job's work
    (all of it, for a session that cannot checkpoint) and queue its demand again, which raises what
    the project is owed (min(entitled, demand)) and not what it is delivered. The waiting job looks
    for room among other projects' jobs below it, or waits. Squatter reclaim is not held by it."""
    return spares_own_project(policy) and job.project == waiting.project


def own_project_words(waiting: JobFacts) -> str:
    """Why a job :func:`own_project_spared` is not taken, in a waiting job's note."""
    return (f"of project {waiting.project}, as the waiting job is: the project's allocation is the same "
            "either way (policy.enforcement.spare_own_project)")


def lost_minutes(job: JobFacts, now: datetime, policy) -> float:
    """Minutes of work a preemption now throws away: a resumable job loses what it did since its
    last checkpoint (every ``checkpoint_interval_minutes`` since it started), any other job all of
    its runtime."""
    ran = max((now - (job.start_time or now)).total_seconds() / 60, 0.0)
    return ran % policy.checkpoint_interval_minutes if resumable(job, policy) else ran


def stale(situation: Situation, policy, cluster: str, source: str) -> str | None:
    """Why the data of ``cluster`` is too old to preempt on (``source``: samples for squatting,
    jobs for demand), or None. Without per-cluster figures, the newest data of any kind counts."""
    per = situation.samples_as_of if source == "samples" else situation.jobs_as_of
    what = "GPU sample" if source == "samples" else "job record"
    if per is None:
        as_of, where = situation.data_as_of, "the newest data"
    else:
        as_of, where = per.get(cluster), f"cluster {cluster}'s newest {what}"
    if as_of is None:
        return ("there is no data to judge from (stale-data guard)" if per is None
                else f"cluster {cluster} has no {what} to judge from (stale-data guard)")
    age = (situation.now - as_of).total_seconds() / 60
    if age > policy.max_data_age_minutes:
        return (f"{where} is {age:.0f} min old (limit {policy.max_data_age_minutes:g}, "
                "policy.enforcement.max_data_age_minutes): no preemption on stale data")
    return None


def held_by_rails(job: JobFacts, situation: Situation, policy) -> str | None:
    """Rails that hold whatever the reason to preempt: the scheduler's live view, the cool-down."""
    if situation.observed_cluster is not None and job.cluster != situation.observed_cluster:
        return (f"the live view is of cluster {situation.observed_cluster} ({situation.observed_by}), this "
                f"job is on cluster {job.cluster}: nothing is preempted (plan with a backend of {job.cluster})")
    if job.observed is None:
        if situation.observed_by is None:
            return ("the plan was made without the scheduler's live view (plan with --observe BACKEND; a plan "
                    "file cannot observe): nothing is preempted")
        return f"{situation.observed_by} does not list this job now (ended or gone): nothing is preempted"
    kept = situation.owner_choices.get(job.key)
    if kept is not None and kept.kept_until is not None and situation.now < kept.kept_until:
        return (f"its owner {kept.user_name} keeps it until {fmt(kept.kept_until)} (asked at {fmt(kept.asked_at)}, "
                "a squatting alert's self-service)")
    hist = situation.history.get(job.key)
    if hist is not None and hist.last_preempted_at is not None:
        until = hist.last_preempted_at + timedelta(minutes=policy.preemption_cooldown_minutes)
        if situation.now < until:
            return (f"it was preempted at {fmt(hist.last_preempted_at)}; the cool-down "
                    f"(preemption_cooldown_minutes {policy.preemption_cooldown_minutes:g}) lasts until {fmt(until)}")
    return None


def act(kind: str, job: JobFacts, reason: str, rule: str, policy, **extra) -> Action:
    mode = None
    if kind == PREEMPT:
        mode = REQUEUE if resumable(job, policy) else STOP
        extra["reason"] = reason + ("; it resumes from its checkpoint, so it is requeued" if mode == REQUEUE
                                    else "; it declares no checkpointing, so it is stopped")
        reason = extra.pop("reason")
    if kind in (PREEMPT, WARN):  # what apply checks again before acting
        extra.setdefault("observed", job.observed)
    return Action(action=kind, cluster=job.cluster, job_id=job.job_id, project=job.project, reason=reason,
                  rule=rule, mode=mode, funded=job.funded, min_runtime_until=job.protected_until,
                  dry_run=policy.dry_run, name=job.name, namespace=job.namespace, source=job.source,
                  kind=job.kind, scheduler_job=job.scheduler_job, **extra)
