"""The hand-built demand-preemption scene the enforcement rule tests share (tests/enforce/test_spare_*):
cluster c with no idle GPU, projects p1..p3 ranked 1..3 by fair share, jobs of 8 H100s, "now" fixed.
A running job started 10 h ago; an unfunded one carries ``unfunded_reason`` (so max_lost_minutes,
which keeps funded work, does not keep it)."""

from __future__ import annotations

from datetime import datetime, timedelta

from gpuledger.enforce.model import JobFacts

NOW = datetime(2026, 11, 7, 12, 0)
H, M = timedelta(hours=1), timedelta(minutes=1)


def job(job_id, project="p3", *, running=True, funded=False, gpus=8.0, unfunded_reason="no budget",
        **kw) -> JobFacts:
    kw.setdefault("start_time", NOW - 10 * H if running else None)
    kw.setdefault("observed", {"state": "RUNNING" if running else "PENDING"})
    return JobFacts(cluster="c", job_id=job_id, project=project, running=running, gpus=gpus, gpu_model="H100",
                    funded=funded, fs_rank={"p1": 1, "p2": 2, "p3": 3}[project],
                    unfunded_reason=None if funded else unfunded_reason, **kw)


def waiting_funded_p1() -> JobFacts:
    """The funded job of p1 (rank 1) that waits for 8 H100s, submitted 30 minutes ago."""
    return job("want", "p1", running=False, funded=True, submit_time=NOW - 30 * M)
