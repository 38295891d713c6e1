-- 018: the squatting pipeline also stores the findings of exempt jobs (policy.squatting.exempt_*),
-- so enforcement — which judges exemptions on the scheduler's live labels, and needs every idle
-- job — reads them materialized (gpuledger.warehouse.read_model.facts.findings(include_exempt=True))
-- instead of recomputing squatting each cycle. They live apart from squatting_findings, so every
-- reader of the episodes (alerts, dashboards, `report squatters`, the weekly report) keeps
-- excluding exempt jobs exactly as before, and their lifecycle events are unchanged. One row per
-- exempt finding per evaluation: the findings as they were at that evaluation.
CREATE TABLE squatting_exempt_findings (
    evaluated_at       TIMESTAMP NOT NULL,   -- squatting_evaluations.evaluated_at
    cluster            VARCHAR NOT NULL,
    job_id             VARCHAR NOT NULL,
    project            VARCHAR,
    user_name          VARCHAR,
    namespace          VARCHAR,
    job_kind           VARCHAR,
    finding            VARCHAR NOT NULL,     -- squatting / partial-idle
    severity           VARCHAR NOT NULL,     -- info / warning / second-warning / preempt-eligible
    gpus_total         BIGINT,
    gpus_idle          BIGINT,
    idle_since         TIMESTAMP,
    idle_minutes       DOUBLE,
    gpu_hours_idle     DOUBLE,
    idle_cost          DECIMAL(38, 2),
    currency           VARCHAR,
    fb_used_bytes_idle BIGINT,
    activity_signal    VARCHAR,
    exempt             BOOLEAN NOT NULL,     -- always true: the flag the computed findings carry
    exempt_reason      VARCHAR NOT NULL,     -- which exemption (namespace / kind / label)
    PRIMARY KEY (evaluated_at, cluster, job_id)
);

-- The evaluations whose exempt findings are stored (all of them from 018 on): an evaluation
-- recorded before 018 stored none, and enforcement computes its findings instead.
CREATE TABLE squatting_exempt_evaluations (
    evaluated_at TIMESTAMP PRIMARY KEY,
    findings     BIGINT NOT NULL              -- exempt findings stored for it
);
