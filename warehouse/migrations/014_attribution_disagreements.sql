-- 014: samples whose pod / hpc_job labels the scheduler side contradicts (issue 20). They are
-- attributed by the scheduler side (device_holdings -> job_allocations); each is kept here, once,
-- so the count is exact however often and in whatever windows ingest looks, and
-- `gpuledger quarantine --source attribution` shows one line per device, hour, label and holder.
CREATE TABLE attribution_disagreements (
    gpu_id       INTEGER NOT NULL,
    ts           TIMESTAMP NOT NULL,
    label_job    VARCHAR NOT NULL,   -- what the labels said (namespace/pod or the Slurm JobID)
    holder_jobs  VARCHAR NOT NULL,   -- the scheduler side's holders, comma-separated; '(nobody)'
    PRIMARY KEY (gpu_id, ts)
);
