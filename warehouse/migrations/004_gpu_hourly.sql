-- 004: per (device, hour) sums of the samples, so analytics read ~170k rows a week per 1,000 GPUs
-- instead of ~20M samples. Kept fresh by warehouse.write_samples, which refreshes the hours each
-- batch touched (delete those hours, re-aggregate: idempotent;
-- see warehouse/rollups.py). Units as gpu_samples: signals are ratios 0..1 (summed), energy in J.
CREATE TABLE gpu_hourly (
    gpu_id                  INTEGER NOT NULL,
    hour                    TIMESTAMP NOT NULL,  -- UTC hour start
    s_n                     BIGINT NOT NULL,     -- samples in the hour
    s_sm_active             DOUBLE NOT NULL,     -- Σ sm_active_ratio clipped to 0..1
    s_gr_engine_active      DOUBLE NOT NULL,     -- Σ gr_engine_active_ratio clipped to 0..1
    s_gpu_util              DOUBLE NOT NULL,     -- Σ gpu_util_ratio clipped to 0..1
    s_n_sm_active           BIGINT NOT NULL,     -- samples with sm_active_ratio
    s_n_gr_engine_active    BIGINT NOT NULL,
    s_n_gpu_util            BIGINT NOT NULL,
    e_first                 DOUBLE,              -- first energy_total_j of the hour (J)
    e_last                  DOUBLE,              -- last energy_total_j of the hour (J)
    e_inside                DOUBLE,              -- Σ counter increments between the hour's samples, a drop = reset
    PRIMARY KEY (gpu_id, hour)
);
