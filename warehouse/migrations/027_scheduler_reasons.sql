-- 027: the scheduler's own word on a waiting job (issue 38), beside gpuledger's ranking.
-- One row each time the scheduler's reason for a job changes, at the time it was first seen:
-- Slurm's pending `Reason` (sacct / squeue: Resources, Priority, Dependency, QOSMaxGRESPerUser ...),
-- Kueue's Workload condition QuotaReserved (reason WaitingForQuota / NoMatchingFlavor /
-- ExceedsMaxQuota ... with its message, and the admission checks' states), and the admission
-- itself (reason `QuotaReserved`, at the condition's transition time: a Workload's wait ends there).
-- Re-reading the same state adds nothing (the writer keeps changes only).
CREATE TABLE scheduler_reasons (
    cluster      VARCHAR NOT NULL,
    job_id       VARCHAR NOT NULL,     -- the jobs row (one run of a requeued Slurm job; a Workload)
    observed_at  TIMESTAMP NOT NULL,   -- UTC: the condition's transition time, else when it was read
    scheduler    VARCHAR NOT NULL,     -- slurm / kueue
    state        VARCHAR,              -- the job's state then (PENDING, Pending, QuotaReserved ...)
    reason       VARCHAR NOT NULL,     -- the scheduler's reason, as it spells it
    message      VARCHAR,              -- its words (Kueue's message; admission checks name=State)
    source       VARCHAR NOT NULL,     -- sacct / scontrol / kubernetes
    PRIMARY KEY (cluster, job_id, observed_at, reason)
);
