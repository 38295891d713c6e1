"""gpuledger's word on a waiting job beside the scheduler's own (issue 38): where gpuledger's
newest plan ranks it among the jobs waiting on its cluster, what the scheduler last said (Slurm's
pending ``Reason``, Kueue's ``QuotaReserved`` reason; scheduler_reasons, migration 027), and
whether the two agree. ``compare`` is pure; the readers take an open connection.

Agreement: Slurm's ``Priority`` (jobs of higher priority are ahead) agrees with any rank but the
1st; ``Resources`` (next in line, its resources are busy) with the 1st; Kueue's ``WaitingForQuota``
/ ``Pending`` (queued for quota) with any rank. Any other reason (a dependency, a QOS or
association limit, a hold, no matching flavor, a quota it exceeds) is one gpuledger does not weigh:
the scheduler holds the job whatever gpuledger ranks it.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from gpuledger.sql import load_sql

SCHEDULER_NAMES = {"slurm": "Slurm", "kueue": "Kueue"}


@dataclass(frozen=True)
class QueuePlace:
    place: int  # 1 = the first of the waiting jobs to start
    waiting: int
    priority: int | None
    planned_at: datetime


@dataclass(frozen=True)
class SchedulerWord:
    observed_at: datetime
    scheduler: str
    state: str | None
    reason: str
    message: str | None


def ordinal(n: int) -> str:
    """1st, 2nd, 3rd, 4th, 11th, 12th, 13th, 21st ..."""
    suffix = "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{suffix}"


def _has(con, table: str) -> bool:
    return bool(con.execute("SELECT count(*) FROM information_schema.tables WHERE table_name = ?",
                            [table]).fetchall()[0][0])


def queue_place(con, cluster: str, job_id: str) -> QueuePlace | None:
    """The job's place in the newest plan that set its priority (None: no such plan, or it ran)."""
    if not _has(con, "enforcement_audit"):
        return None
    rows = con.execute(load_sql(__package__, "queue_place.sql"), {"cluster": cluster, "job": job_id}).fetchall()
    return QueuePlace(*rows[0]) if rows else None


def scheduler_words(con, cluster: str | None, job_id: str) -> list[tuple[str, SchedulerWord]]:
    """(cluster, what the scheduler said) for the job, oldest first (each row a change)."""
    if not _has(con, "scheduler_reasons"):
        return []
    rows = con.execute("SELECT cluster, observed_at, scheduler, state, reason, message FROM scheduler_reasons "
                       "WHERE job_id = $job AND ($cluster IS NULL OR cluster = $cluster) ORDER BY observed_at",
                       {"job": job_id, "cluster": cluster}).fetchall()
    return [(r[0], SchedulerWord(*r[1:])) for r in rows]


def compare(place: QueuePlace | None, word: SchedulerWord | None) -> tuple[bool | None, str]:
    """(agree: True / False, None when one side is missing; the sentence saying both)."""
    if word is None and place is None:
        return None, "neither gpuledger nor the scheduler has said anything about this job waiting"
    who = SCHEDULER_NAMES.get(word.scheduler, word.scheduler) if word else None
    ours = (f"gpuledger ranks it {ordinal(place.place)} of {place.waiting} waiting on its cluster "
            f"(priority {place.priority}, plan of {place.planned_at:%Y-%m-%d %H:%M}Z)") if place else None
    theirs = f"{who} says `{word.reason}`" + (f" ({word.message})" if word.message else "") if word else None
    if place is None:
        return None, f"{theirs}; gpuledger has not ranked it (no enforcement plan set its priority)"
    if word is None:
        return None, f"{ours}; the scheduler has given no reason (none recorded: `gpuledger ingest slurm --live` " \
                     "or the Kubernetes ingest records it)"
    if word.reason == "QuotaReserved":
        return None, f"{ours}; Kueue has admitted it (quota reserved at {word.observed_at:%Y-%m-%d %H:%M}Z)"
    if word.reason == "Priority":
        agree = place.place > 1
        why = ("jobs of higher priority are ahead of it, as gpuledger ranks it" if agree else
               f"{who} keeps other work above it although gpuledger ranks it first: the planned priority has not "
               "reached the scheduler (`gpuledger enforce apply`), or the scheduler's own factors outweigh it")
    elif word.reason == "Resources":
        agree = place.place == 1
        why = ("it is next in line and waits for GPUs to free" if agree else
               f"{who} counts it next in line for its resources although gpuledger ranks it "
               f"{ordinal(place.place)}: the jobs ahead of it in gpuledger's order ask for other resources, or "
               "the scheduler orders this partition by its own priority")
    elif word.reason in ("WaitingForQuota", "Pending"):
        agree, why = True, "it waits for quota in its ClusterQueue, in the order of its priority"
    else:
        agree = False
        why = (f"{who} holds it for a reason gpuledger does not weigh: whatever gpuledger ranks it, it starts only "
               f"once `{word.reason}` clears")
    verdict = "they agree" if agree else "they DISAGREE"
    return agree, f"{ours}; {theirs} — {verdict}: {why}"
