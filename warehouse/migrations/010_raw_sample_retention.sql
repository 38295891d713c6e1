-- 010: raw-sample retention (warehouse/retention.py). Each prune of gpu_samples records the hour
-- below which the gpu_hourly rollup is final: samples there may be gone (except the partial hours
-- the reports still read), readers trust the rollup there, and writes no longer change those hours.
CREATE TABLE retention_marks (
    table_name      VARCHAR NOT NULL,    -- gpu_samples
    pruned_before   TIMESTAMP NOT NULL,  -- UTC hour start: rows older than this were pruned
    pruned_at       TIMESTAMP NOT NULL,  -- UTC, when
    rows_deleted    BIGINT NOT NULL,
    rows_kept       BIGINT NOT NULL,     -- older rows kept: partial hours (allocation edges) and hours whose rollup could not be completed
    PRIMARY KEY (table_name, pruned_before)
);
