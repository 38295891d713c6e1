-- 009: answers the Dagster pipelines materialize (pipelines/defs/*), so dashboards, reports and
-- enforcement read them instead of recomputing. Daily- and monthly-partitioned tables carry their
-- partition key (`day`, `period`); rematerializing a partition deletes its rows and inserts the
-- new ones in one transaction. Units as in the analytics: GPU-hours, kWh, ratios 0..1, pct 0..100.

-- Hourly usage per job (reports.usage_report by="job", per_hour) and per project (by="project").
CREATE TABLE usage_hourly_jobs (
    day                 DATE NOT NULL,       -- partition (UTC day of `hour`)
    hour                TIMESTAMP NOT NULL,  -- UTC hour start
    cluster             VARCHAR NOT NULL,
    job_id              VARCHAR NOT NULL,
    project             VARCHAR,
    user_name           VARCHAR,
    gpu_hours_allocated DOUBLE NOT NULL,
    gpu_hours_active    DOUBLE,
    gpu_hours_idle      DOUBLE,
    gpu_hours_unknown   DOUBLE,
    energy_kwh          DOUBLE,
    efficiency_ratio    DOUBLE,
    materialized_at     TIMESTAMP NOT NULL
);
CREATE INDEX usage_hourly_jobs_day ON usage_hourly_jobs (day);

CREATE TABLE usage_hourly_projects (
    day                 DATE NOT NULL,
    hour                TIMESTAMP NOT NULL,
    project             VARCHAR NOT NULL,
    gpu_hours_allocated DOUBLE NOT NULL,
    gpu_hours_active    DOUBLE,
    gpu_hours_idle      DOUBLE,
    gpu_hours_unknown   DOUBLE,
    energy_kwh          DOUBLE,
    efficiency_ratio    DOUBLE,
    materialized_at     TIMESTAMP NOT NULL
);
CREATE INDEX usage_hourly_projects_day ON usage_hourly_projects (day);

-- Utilization of installed capacity per cluster, GPU model and hour (reports.utilization_report).
CREATE TABLE utilization_hourly (
    day                     DATE NOT NULL,
    hour                    TIMESTAMP NOT NULL,
    cluster                 VARCHAR NOT NULL,
    model                   VARCHAR NOT NULL,
    gpu_hours_capacity      DOUBLE NOT NULL,
    gpu_hours_allocated     DOUBLE NOT NULL,
    gpu_hours_active        DOUBLE,
    gpu_hours_unknown       DOUBLE,
    allocation_pct          DOUBLE,
    active_pct              DOUBLE,
    active_of_allocated_pct DOUBLE,
    materialized_at         TIMESTAMP NOT NULL
);
CREATE INDEX utilization_hourly_day ON utilization_hourly (day);

-- Fair share per org node as of a moment (reports.fairshare_report): the history the dashboards
-- plot. One snapshot per day partition, as of the day's end (today: as of the data's "now",
-- replaced on every refresh until the day closes).
CREATE TABLE fairshare_snapshots (
    day                 DATE NOT NULL,
    as_of               TIMESTAMP NOT NULL,
    node                VARCHAR NOT NULL,
    parent              VARCHAR,
    depth               INTEGER,
    kind                VARCHAR,
    shares_raw          DOUBLE,
    shares_norm         DOUBLE,
    share_global        DOUBLE,
    usage_raw_gpu_hours DOUBLE,
    usage_norm          DOUBLE,
    usage_effective     DOUBLE,
    level_fs            DOUBLE,              -- +inf with no usage
    fs_rank             INTEGER,
    fairshare_factor    DOUBLE,
    queue_order         INTEGER,             -- fairshare_report's `order` (depth-first, descending LF)
    gpu_hours_window    DOUBLE,
    gpu_hours_decayed   DOUBLE,
    delivery_ratio      DOUBLE,
    occupancy_ratio     DOUBLE,
    materialized_at     TIMESTAMP NOT NULL
);
CREATE INDEX fairshare_snapshots_day ON fairshare_snapshots (day);

-- Budget burn per org node as of a moment (reports.budget_report): the burn-down history.
CREATE TABLE budget_snapshots (
    day                    DATE NOT NULL,
    as_of                  TIMESTAMP NOT NULL,
    node                   VARCHAR NOT NULL,
    period_start           DATE,
    period_end             DATE,
    budget_gpu_hours       DOUBLE,           -- normalised GPU-hours
    budget_own             BOOLEAN,
    consumed_gpu_hours     DOUBLE,
    remaining_gpu_hours    DOUBLE,
    burn_gpu_hours_per_day DOUBLE,
    projected_exhaustion   TIMESTAMP,
    status                 VARCHAR,          -- funded / at-risk / exhausted
    materialized_at        TIMESTAMP NOT NULL
);
CREATE INDEX budget_snapshots_day ON budget_snapshots (day);

-- Squatting findings with their lifecycle: one row per episode (a job idle from first_seen until
-- resolved_at, NULL while open), its latest evidence, and every change as an event.
CREATE TABLE squatting_findings (
    cluster            VARCHAR NOT NULL,
    job_id             VARCHAR NOT NULL,
    first_seen         TIMESTAMP NOT NULL,   -- evaluation time the episode was first found
    last_seen          TIMESTAMP NOT NULL,   -- latest evaluation that still found it
    resolved_at        TIMESTAMP,            -- first evaluation that no longer found it
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
    PRIMARY KEY (cluster, job_id, first_seen)
);

CREATE TABLE squatting_finding_events (
    cluster      VARCHAR NOT NULL,
    job_id       VARCHAR NOT NULL,
    first_seen   TIMESTAMP NOT NULL,          -- the episode
    event_time   TIMESTAMP NOT NULL,          -- evaluation time
    event        VARCHAR NOT NULL,            -- opened / severity-changed / resolved
    finding      VARCHAR,
    severity     VARCHAR,
    idle_minutes DOUBLE,
    PRIMARY KEY (cluster, job_id, first_seen, event_time, event)
);

-- When squatting was last evaluated (evaluations never go back in time).
CREATE TABLE squatting_evaluations (
    evaluated_at TIMESTAMP PRIMARY KEY,
    findings     BIGINT NOT NULL,
    recorded_at  TIMESTAMP NOT NULL
);

-- Monthly chargeback statements at project level (ledger.periods.statement_lines), one partition
-- per month: charge lines, the idle line and, for a closed month, its corrections (credit / debit);
-- Σ amount = Σ capacity × price for the month.
CREATE TABLE chargeback_statements (
    period               VARCHAR NOT NULL,    -- YYYY-MM
    period_start         TIMESTAMP NOT NULL,
    period_end           TIMESTAMP NOT NULL,
    line_kind            VARCHAR NOT NULL,    -- charge / idle
    project              VARCHAR,
    gpu_model            VARCHAR,
    tier                 VARCHAR,
    currency             VARCHAR,
    gpu_hours            DOUBLE,              -- allocated GPU-hours (idle lines: idle GPU-hours)
    amount               DECIMAL(38, 2) NOT NULL,
    idle_amount_included DECIMAL(38, 2),
    revision             INTEGER,             -- closed months: 0 = as issued, 1.. = corrections; NULL = open
    correction_of        VARCHAR,             -- the line kind a credit / debit line corrects
    materialized_at      TIMESTAMP NOT NULL
);
CREATE INDEX chargeback_statements_period ON chargeback_statements (period);
