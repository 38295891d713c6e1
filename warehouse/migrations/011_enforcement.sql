-- 011: enforcement (gpuledger.enforce). Every planned and applied action is a row of
-- enforcement_audit; warnings issued to squatters survive restarts in enforcement_warnings (a
-- squatting preemption needs one recorded long enough before); enforcement_job_state keeps, per
-- job, the priority gpuledger set (to re-assert it when Kueue's WorkloadPriorityClass reconciler
-- rewrites it) and how often the job was preempted.

CREATE TABLE enforcement_audit (
    action_id           VARCHAR NOT NULL,   -- <plan_id>:<n>; one per planned action
    phase               VARCHAR NOT NULL,   -- planned / applied
    attempt             INTEGER NOT NULL,   -- 0 for planned; 1.. per apply run that touched it
    plan_id             VARCHAR NOT NULL,
    planned_at          TIMESTAMP NOT NULL, -- the cycle's "now" (UTC)
    recorded_at         TIMESTAMP NOT NULL, -- wall clock of this row
    action              VARCHAR NOT NULL,   -- set-priority / warn / preempt / none
    cluster             VARCHAR NOT NULL,
    job_id              VARCHAR NOT NULL,
    project             VARCHAR,
    reason              VARCHAR NOT NULL,   -- words a researcher understands, with the figures
    rule                VARCHAR,            -- which rule or rail decided (explain, tests)
    priority            BIGINT,             -- set-priority: the value
    mode                VARCHAR,            -- preempt: requeue / stop
    funded              BOOLEAN,
    min_runtime_until   TIMESTAMP,
    warned_at           TIMESTAMP,          -- the earlier warning a preemption relies on
    dry_run             BOOLEAN NOT NULL,
    backend             VARCHAR,            -- applied rows: kueue / kubernetes / slurm / plan-file
    outcome             VARCHAR NOT NULL,   -- planned / done / dry-run / unchanged / refused / error / skipped
    error               VARCHAR,
    inputs              VARCHAR,            -- JSON: the figures the decision used
    PRIMARY KEY (action_id, phase, attempt)
);
CREATE INDEX enforcement_audit_job ON enforcement_audit (cluster, job_id);

CREATE TABLE enforcement_warnings (
    cluster         VARCHAR NOT NULL,
    job_id          VARCHAR NOT NULL,
    idle_since      TIMESTAMP NOT NULL,     -- the idle episode the warning belongs to
    stage           VARCHAR NOT NULL,       -- warning / second-warning / preempt-eligible
    warned_at       TIMESTAMP NOT NULL,
    action_id       VARCHAR NOT NULL,
    PRIMARY KEY (cluster, job_id, idle_since, stage)
);

CREATE TABLE enforcement_job_state (
    cluster             VARCHAR NOT NULL,
    job_id              VARCHAR NOT NULL,
    declared_priority   BIGINT,             -- the job's own priority before gpuledger first changed it
    applied_priority    BIGINT,             -- what gpuledger last set (done, not dry run)
    applied_at          TIMESTAMP,
    preemptions         INTEGER NOT NULL DEFAULT 0,
    last_preempted_at   TIMESTAMP,
    PRIMARY KEY (cluster, job_id)
);
