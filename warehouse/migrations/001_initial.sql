-- 001: the initial warehouse. All timestamps are TIMESTAMP holding UTC (no local time anywhere).
-- Units are in column names: *_ratio (0..1), *_bytes, *_w (watts), *_j (joules), *_s (seconds).

-- GPU inventory: one row per schedulable device, a whole GPU or one MIG instance.
-- gpu_id is a dense integer surrogate so that 10^7-row sample scans join on integers, not UUIDs.
CREATE SEQUENCE IF NOT EXISTS gpu_id_seq START 1;
CREATE TABLE gpus (
    gpu_id              INTEGER PRIMARY KEY DEFAULT nextval('gpu_id_seq'),
    cluster             VARCHAR NOT NULL,
    gpu_uuid            VARCHAR NOT NULL,      -- physical GPU UUID (GPU-...)
    mig_instance_id     INTEGER NOT NULL DEFAULT -1, -- GPU_I_ID; -1 = the whole GPU
    host                VARCHAR NOT NULL,      -- canonical host name (short, lower case)
    gpu_index           INTEGER,               -- the exporter's `gpu` label
    pci_bus_id          VARCHAR,
    model               VARCHAR NOT NULL,      -- normalised model key used by the rate card: H100, B200, B300, A100
    model_name          VARCHAR,               -- raw modelName label, e.g. "NVIDIA H100 80GB HBM3"
    mig_profile         VARCHAR,               -- GPU_I_PROFILE, e.g. 1g.10gb; NULL for a whole GPU
    gpu_fraction        DOUBLE NOT NULL DEFAULT 1.0, -- compute share of the physical GPU (1g = 1/7)
    framebuffer_total_bytes BIGINT,
    pricing_tier        VARCHAR NOT NULL DEFAULT 'reserved', -- reserved / on-demand / spot
    first_seen          TIMESTAMP,
    last_seen           TIMESTAMP,
    UNIQUE (cluster, gpu_uuid, mig_instance_id)
);

-- Raw samples, one row per device per timestamp (natural key). Values are cleaned at ingest:
-- sentinel "blank" values become NULL; unit conversions (percent -> ratio, MiB -> bytes) are done.
CREATE TABLE gpu_samples (
    gpu_id                  INTEGER NOT NULL,
    ts                      TIMESTAMP NOT NULL,
    sm_active_ratio         DOUBLE,   -- DCGM_FI_PROF_SM_ACTIVE
    gr_engine_active_ratio  DOUBLE,   -- DCGM_FI_PROF_GR_ENGINE_ACTIVE
    tensor_active_ratio     DOUBLE,   -- DCGM_FI_PROF_PIPE_TENSOR_ACTIVE
    dram_active_ratio       DOUBLE,   -- DCGM_FI_PROF_DRAM_ACTIVE
    gpu_util_ratio          DOUBLE,   -- DCGM_FI_DEV_GPU_UTIL / 100
    fb_used_bytes           BIGINT,   -- DCGM_FI_DEV_FB_USED (MiB * 2^20)
    fb_total_bytes          BIGINT,   -- FB_USED + FB_FREE (+ FB_RESERVED)
    power_w                 DOUBLE,   -- DCGM_FI_DEV_POWER_USAGE
    energy_total_j          DOUBLE,   -- DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION (mJ / 1000): a counter, resets on driver reload
    namespace               VARCHAR,
    pod                     VARCHAR,
    container               VARCHAR,
    hpc_job                 VARCHAR,
    source                  VARCHAR NOT NULL, -- simulator / scrape / prometheus / nvml
    PRIMARY KEY (gpu_id, ts)
);

-- Jobs: one row per job, keyed by cluster-scoped id.
CREATE TABLE jobs (
    cluster         VARCHAR NOT NULL,
    job_id          VARCHAR NOT NULL,
    project         VARCHAR NOT NULL,
    user_name       VARCHAR,
    name            VARCHAR,
    kind            VARCHAR,            -- training / fine-tune / batch / inference / interactive
    gpu_model       VARCHAR,
    gpus            DOUBLE NOT NULL,    -- GPUs requested; fractional for MIG slices or shared GPUs
    min_runtime_s   BIGINT,             -- declared minimum runtime (seconds); NULL / 0 = none
    submit_time     TIMESTAMP,
    start_time      TIMESTAMP,
    end_time        TIMESTAMP,          -- NULL = still running
    state           VARCHAR,
    priority        BIGINT,
    namespace       VARCHAR,
    source          VARCHAR NOT NULL,
    updated_at      TIMESTAMP NOT NULL,
    PRIMARY KEY (cluster, job_id)
);

-- Which devices a job held, and when. Allocated GPU-hours = gpu_fraction * hours of the interval.
CREATE TABLE job_allocations (
    cluster         VARCHAR NOT NULL,
    job_id          VARCHAR NOT NULL,
    gpu_id          INTEGER NOT NULL,
    start_time      TIMESTAMP NOT NULL,
    end_time        TIMESTAMP,          -- NULL = still held
    gpu_fraction    DOUBLE NOT NULL DEFAULT 1.0, -- share of the device held (shared GPUs: 0.46)
    PRIMARY KEY (cluster, job_id, gpu_id, start_time)
);

-- Org tree of any depth: org -> program -> project. Node names are unique; jobs name a node.
CREATE TABLE org_nodes (
    node          VARCHAR PRIMARY KEY,
    parent        VARCHAR,              -- NULL for the root
    kind          VARCHAR NOT NULL,     -- org / program / project (free text; depth is what counts)
    shares        DOUBLE NOT NULL,      -- raw share among its siblings (normalised by the analytics)
    description   VARCHAR
);

-- GPU-hour budgets per node and period, in normalised GPU-hours (GPU-hours x model budget weight).
CREATE TABLE budgets (
    node              VARCHAR NOT NULL,
    period_start      DATE NOT NULL,
    period_end        DATE NOT NULL,    -- exclusive
    budget_gpu_hours  DECIMAL(18, 3) NOT NULL,
    PRIMARY KEY (node, period_start)
);

-- Prices per GPU-hour by model and tier, effective from a date (until the next row's date).
CREATE TABLE rate_card (
    gpu_model           VARCHAR NOT NULL,
    tier                VARCHAR NOT NULL,
    effective_from      TIMESTAMP NOT NULL,
    price_per_gpu_hour  DECIMAL(18, 6) NOT NULL,
    currency            VARCHAR NOT NULL,
    budget_weight       DOUBLE NOT NULL DEFAULT 1.0,
    PRIMARY KEY (gpu_model, tier, effective_from)
);

-- Everything that could not be read, with the raw text and why. Keyed so re-reading the same
-- bad input does not add it twice.
CREATE TABLE quarantine (
    source          VARCHAR NOT NULL,   -- e.g. jobs-csv, scrape, prometheus
    location        VARCHAR NOT NULL,   -- file:line, URL, ...
    raw_text        VARCHAR NOT NULL,
    raw_md5         VARCHAR NOT NULL,
    reason          VARCHAR NOT NULL,
    quarantined_at  TIMESTAMP NOT NULL,
    PRIMARY KEY (source, location, raw_md5)
);
