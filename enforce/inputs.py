"""The Situation of one cycle, read from the warehouse: jobs not ended at ``now``, their funding,
their project's fair-share rank, squatting findings, idle GPUs per (cluster, model), and what
enforcement recorded before (warnings, applied priorities, preemption counts).

``now`` may lie in the past (a replayed week): a job is running at ``now`` when it had started and
not ended by then, waiting when it was submitted but not yet started.
"""

from __future__ import annotations

import re
from datetime import datetime, timedelta

import duckdb
from gpuledger.enforce import audit, team_store
from gpuledger.enforce.model import Finding, JobFacts, Situation

from gpuledger import facts
from gpuledger.analytics.fairshare import over_share_projects
from gpuledger.config import Config
from gpuledger.heap import collector_paused
from gpuledger.rules.severity import idle_capped
from gpuledger.sql import load_sql

_JOBS = load_sql(__package__, "running_and_queued_jobs.sql")
#: Kueue Workload states (ingest.jobs.k8s_mapping) in which the workload holds its quota: it runs
#: as its pods, which the workload stands for here.
KUEUE_ADMITTED = ("ADMITTED", "QUOTARESERVED")

# Whole-GPU equivalents installed at `now` minus those held at `now`, per (cluster, model).
_FREE = load_sql(__package__, "free_gpus.sql")
# GPUs with nothing on them, per (cluster, model): what a job of whole GPUs can start on.
_FREE_WHOLE = load_sql(__package__, "free_whole_gpus.sql")


#: Fields of a backend's live view that identify the job and its state; a plan records them per
#: action and apply acts only while the scheduler still shows the same (Backend.live).
IDENTITY = ("uid", "scheduler_job", "submit_time", "state", "phase", "restarts", "requeue_flag", "active", "gpus")


def snapshot(seen: dict, policy) -> dict:
    """What a plan records of one job's live view: its identity fields, and the labels and
    annotations a decision reads (exemptions, checkpointing) — absent ones as None, so a label
    added after the plan is a change too."""
    out = {k: seen[k] for k in IDENTITY if seen.get(k) is not None}
    rails = policy.enforcement
    label_keys = sorted({*rails.exempt_labels, *policy.squatting.exempt_labels, rails.checkpoint_label})
    labels, annotations = seen.get("labels") or {}, seen.get("annotations") or {}
    out["labels"] = {k: labels.get(k) for k in label_keys}
    out["annotations"] = {rails.checkpoint_annotation: annotations.get(rails.checkpoint_annotation)}
    return out


@collector_paused()
def gather(con: duckdb.DuckDBPyConnection, cfg: Config, *, now: datetime,
           observed: dict[str, dict] | None = None, observed_by: str | None = None,
           observed_cluster: str | None = None) -> Situation:
    """The Situation at ``now`` (naive UTC). ``observed``: per job id what a backend saw live
    (Backend.observe: identity, ``labels``, ``annotations``, ``requeue_flag``, ``priority``); None
    when no backend was asked — then nothing can be preempted (policy ``_blocked``).
    ``observed_cluster``: the cluster that backend talks to — its view joins that cluster's jobs
    only (job ids repeat across clusters: another cluster's job 2 is not this one's)."""
    if observed is None:
        observed_by = None
    elif observed_by is None:
        observed_by = "the scheduler"
    policy = cfg.policy
    # the facts as of `now` through the read model: fair share and findings (exempt jobs included:
    # exemptions are judged on the live labels) materialized when fresh for `now` and the policy is
    # the stored one, else computed — findings only from an evaluation at `now` itself, never an
    # older one (it could preempt a job busy since); funding always computed
    funding = {(r["cluster"], r["job_id"]): r
               for r in facts.funding(con, policy=policy, now=now).frame.iter_rows(named=True)}
    tree = list(facts.fairshare(con, policy=policy, as_of=now).frame.iter_rows(named=True))
    ranks = fairshare_ranks(tree)
    found = facts.findings(con, policy=policy, now=now, include_exempt=True, exact_moment=True)
    findings = [finding_from_row(r) for r in found.frame.iter_rows(named=True) if r["idle_since"] is not None]
    rows = [dict(zip(_NAMES, r, strict=True)) for r in con.execute(_JOBS, {"now": now}).fetchall()]
    rows, findings = _kueue_workloads_stand_for_their_pods(rows, findings, now)
    rows, findings = _het_jobs_are_one_job(rows, findings)
    choices = team_store.load_choices(con)
    jobs = [job_facts(r, team_funded(funding.get((r["cluster"], r["job_id"]), {}),
                                     choices.get((r["cluster"], r["job_id"])), r, policy),
                      observed if observed_cluster is None or r["cluster"] == observed_cluster else {},
                      policy, ranks, now) for r in rows]
    free = {(c, m): float(f) for c, m, f in con.execute(_FREE, {"now": now}).fetchall()}
    whole = {(c, m): float(f) for c, m, f in con.execute(_FREE_WHOLE, {"now": now}).fetchall()}
    samples_as_of, jobs_as_of = freshness(con, now)
    squat = policy.squatting
    behind = None
    if policy.enforcement.spare_behind_owed:  # the running settlement period's delivery, as reports settle it
        behind = facts.behind_owed(con, policy=policy, as_of=now)
    return Situation(
        now=now, jobs=jobs, findings=findings, warnings=audit.load_warnings(con),
        history=audit.load_history(con), free_gpus=free, free_whole_gpus=whole, fs_projects=len(ranks),
        over_share=over_share_projects(tree), behind_owed=behind,
        data_as_of=facts.data_now(con, wall=now) if _has_data(con, now) else None,
        samples_as_of=samples_as_of, jobs_as_of=jobs_as_of,
        recent_preemptions=audit.recent_preemptions(con, since=now - timedelta(hours=1)),
        squatting_exempt={"namespaces": list(squat.exempt_namespaces), "kinds": list(squat.exempt_kinds),
                          "labels": dict(squat.exempt_labels)},
        observed_by=observed_by, observed_cluster=observed_cluster,
        team_choices=choices, owner_choices=team_store.load_owner_choices(con, now),
    )


def team_funded(fund: dict, choice, row: dict, policy) -> dict:
    """The job's funding row, funded by its team's budget where its lead marked it so
    (enforce.team_store checked the mark against the budget left): a job whose project still has
    budget but which declares no minimum runtime takes the lead's hours (capped) as its minimum
    runtime. A project whose budget ran out since stays unfunded, and says the lead's mark waits."""
    if choice is None or choice.fund_hours is None or fund.get("funded"):
        return fund
    if fund.get("unfunded_reason") != "no minimum runtime declared":
        why = fund.get("unfunded_reason") or "not funded"
        return {**fund, "unfunded_reason": f"{why} (its team lead's funding mark waits for budget)"}
    seconds = int(min(choice.fund_hours, policy.funding.min_runtime_cap_hours) * 3600)
    start = row.get("start_time")
    return {**fund, "funded": True, "unfunded_reason": None, "min_runtime_s_effective": seconds,
            "protected_until": start + timedelta(seconds=seconds) if start is not None else None,
            "funded_by": f"team {choice.node}'s lead {choice.set_by}"}


def fairshare_ranks(tree_rows) -> dict[str, int]:
    """Fair-share rank per node of the tree's rows (nodes without a rank left out)."""
    return {r["node"]: r["fs_rank"] for r in tree_rows if r["fs_rank"] is not None}


def finding_from_row(r: dict) -> Finding:
    """One row of the findings (materialized or computed: the same columns) as enforcement's
    Finding; ``capped`` when idle for the whole evidence lookback (to the minute)."""
    return Finding(cluster=r["cluster"], job_id=r["job_id"], finding=r["finding"], severity=r["severity"],
                   idle_since=r["idle_since"], idle_minutes=float(r["idle_minutes"]), gpus_idle=int(r["gpus_idle"]),
                   gpus_total=int(r["gpus_total"]), gpu_hours_idle=float(r["gpu_hours_idle"] or 0),
                   idle_cost=None if r["idle_cost"] is None else str(r["idle_cost"]), currency=r["currency"],
                   capped=bool(idle_capped(float(r["idle_minutes"]))))


def job_facts(r: dict, fund: dict, observed: dict[str, dict] | None, policy, ranks: dict[str, int],
              now: datetime) -> JobFacts:
    """One job row (running_and_queued_jobs.sql) with its funding row (``fund``, {} when none), what
    the backend saw of it (``observed``, by job id or scheduler name; None: no backend asked) and
    its project's fair-share rank, as JobFacts at ``now``."""
    seen = (observed or {}).get(r["job_id"]) or (observed or {}).get(r["scheduler_job"] or "")
    live = None if seen is None or observed is None else snapshot(seen, policy)
    seen = seen or {}
    start = r["start_time"]
    running = start is not None and start <= now
    gpus = float(r["gpus"]) * (1 if running else array_width(r["job_id"]))
    protected_until = fund.get("protected_until")
    if r.get("_derived_start") and fund.get("funded"):  # a workload: its pods' start + its minimum runtime
        protected_until = start + timedelta(seconds=int(fund.get("min_runtime_s_effective") or 0))
    return JobFacts(
        cluster=r["cluster"], job_id=r["job_id"], project=r["project"], running=running, gpus=gpus, qos=r.get("qos"),
        gpu_model=r["gpu_model"], name=r["name"], namespace=r["namespace"], kind=r["kind"], source=r["source"],
        user_name=r["user_name"], start_time=start if running else None, submit_time=r["submit_time"],
        declared_priority=r["priority"],
        observed_priority=seen["priority"] if seen.get("priority") is not None else r["priority"],
        funded=bool(fund.get("funded")), unfunded_reason=fund.get("unfunded_reason"), funded_by=fund.get("funded_by"),
        protected_until=protected_until if running else None, fs_rank=ranks.get(r["project"]),
        labels=seen.get("labels") or {}, annotations=seen.get("annotations") or {},
        requeue_flag=seen.get("requeue_flag"), scheduler_job=r["scheduler_job"], partition=r["partition"],
        time_limit_s=r.get("time_limit_s"), observed=live,
    )


_FRESH = load_sql(__package__, "freshness.sql")


def freshness(con, now: datetime) -> tuple[dict[str, datetime], dict[str, datetime]]:
    """Per cluster at ``now``: (newest GPU sample, newest job record) — the stale-data guard's
    figures (a preemption on a cluster needs that cluster's own data fresh)."""
    samples, jobs = {}, {}
    for cluster, s_at, j_at in con.execute(_FRESH, {"now": now}).fetchall():
        if s_at is not None:
            samples[cluster] = s_at
        if j_at is not None:
            jobs[cluster] = j_at
    return samples, jobs


_NAMES = ("cluster", "job_id", "project", "name", "namespace", "kind", "source", "user_name", "gpus", "gpu_model",
          "start_time", "submit_time", "priority", "scheduler_job", "state", "partition", "qos", "time_limit_s")

# a Slurm array's pending tasks as sacct lists them: 12_[0-7], 12_[1,3,5-9%2] (at most 2 at once)
_ARRAY = re.compile(r"^\d+_\[([0-9,\-]+)(?:%(\d+))?\]$")
_HET = re.compile(r"^(\d+)\+(\d+)$")


def array_width(job_id: str) -> int:
    """How many of a pending Slurm array's tasks can run at once (its task count, at most its
    throttle): its GPU request is that many times one task's. 1 for any other job."""
    m = _ARRAY.match(job_id or "")
    if not m:
        return 1
    tasks = 0
    for part in m.group(1).split(","):
        lo, _, hi = part.partition("-")
        if lo.isdigit() and (not hi or hi.isdigit()):
            tasks += int(hi or lo) - int(lo) + 1 if not hi or int(hi) >= int(lo) else 0
    return max(min(tasks, int(m.group(2))) if m.group(2) else tasks, 1)


def _het_jobs_are_one_job(rows: list[dict], findings: list[Finding]):
    """A Slurm heterogeneous job's components (12+0, 12+1 …, one row each) start, stop and are
    charged together: they are one job here — funded, sized, waiting and preempted as one (its GPUs
    summed, under its first component's row; scontrol and scancel act on the whole job) — squatting
    when every component squats."""
    groups: dict[tuple[str, str], list[dict]] = {}
    for r in rows:
        m = _HET.match(r["job_id"] or "")
        if m and str(r["source"] or "").startswith("slurm"):
            groups.setdefault((r["cluster"], m.group(1)), []).append(r)
    groups = {k: sorted(v, key=lambda r: int(_HET.match(r["job_id"]).group(2))) for k, v in groups.items()
              if len(v) > 1}
    if not groups:
        return rows, findings
    by_job = {(f.cluster, f.job_id): f for f in findings}
    dropped, out_findings = set(), list(findings)
    for members in groups.values():
        leader = members[0]
        models = {m["gpu_model"] for m in members}
        leader["gpus"] = sum(float(m["gpus"]) for m in members)
        leader["gpu_model"] = leader["gpu_model"] if len(models) == 1 else None  # any model serves it
        dropped.update((m["cluster"], m["job_id"]) for m in members[1:])
        squats = [by_job.get((m["cluster"], m["job_id"])) for m in members]
        out_findings = [f for f in out_findings if (f.cluster, f.job_id) not in {(m["cluster"], m["job_id"])
                                                                                 for m in members}]
        whole = squatting_as_one(squats, leader["job_id"])
        if whole is not None:
            out_findings.append(whole)
    return [r for r in rows if (r["cluster"], r["job_id"]) not in dropped], out_findings


def squatting_as_one(parts: list[Finding | None], job_id: str) -> Finding | None:
    """The finding of a job made of parts (a workload's pods, a het job's components): squatting
    only when every part squats — idle since the shortest part's stretch, its GPUs summed — else None."""
    if not all(f is not None and f.finding == "squatting" for f in parts):
        return None
    least = min(parts, key=lambda f: f.idle_minutes)
    return Finding(**{**least.__dict__, "job_id": job_id, "gpus_idle": sum(f.gpus_idle for f in parts),
                      "gpus_total": sum(f.gpus_total for f in parts),
                      "gpu_hours_idle": sum(f.gpu_hours_idle for f in parts)})


def _kueue_workloads_stand_for_their_pods(rows: list[dict], findings: list[Finding], now: datetime):
    """An admitted Kueue Workload runs as its pods: the workload row (no start time by design) is the
    job enforcement acts on — started when its first running pod did, squatting when every one of
    its pods squats (the shortest idle stretch counts) — and its pods (same cluster, namespace and
    owner name) leave the list, so one job is never acted on twice."""
    admitted = {(r["cluster"], r["namespace"], r["name"]): r for r in rows
                if r["source"] == "kueue" and str(r["state"] or "").upper() in KUEUE_ADMITTED}
    if not admitted:
        return rows, findings
    pods: dict[tuple, list[dict]] = {}
    kept = []
    for r in rows:
        key = (r["cluster"], r["namespace"], r["name"])
        if r["source"] == "kubernetes" and key in admitted and r["start_time"] is not None:
            pods.setdefault(key, []).append(r)
        else:
            kept.append(r)
    by_job = {(f.cluster, f.job_id): f for f in findings}
    out_findings = [f for f in findings if not any((f.cluster, f.job_id) == (p["cluster"], p["job_id"])
                                                   for ps in pods.values() for p in ps)]
    for key, workload in admitted.items():
        members = pods.get(key, [])
        if not members:  # quota reserved, pods not running yet: neither running nor waiting for GPUs
            kept.remove(workload)
            continue
        workload["start_time"] = min(p["start_time"] for p in members)
        workload["_derived_start"] = True
        whole = squatting_as_one([by_job.get((p["cluster"], p["job_id"])) for p in members], workload["job_id"])
        if whole is not None:
            out_findings.append(whole)
    return kept, out_findings


def _has_data(con, now) -> bool:
    return bool(con.execute("SELECT EXISTS (SELECT 1 FROM gpu_samples WHERE ts <= $now) "
                            "OR EXISTS (SELECT 1 FROM jobs WHERE submit_time <= $now)", {"now": now}).fetchone()[0])
