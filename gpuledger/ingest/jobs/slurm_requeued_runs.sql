-- The stored Slurm runs a later run of the same job replaces (an export without -D shows only the
-- latest run of a requeued job): each gets its own run id (job_id@start) and ends at its End if
-- known, else when the new run was queued (Slurm resets Submit on requeue), else when it started.
CREATE OR REPLACE TEMP TABLE _slurm_runs AS
SELECT j.cluster, j.job_id,
       j.job_id || '@' || strftime(j.start_time, '%Y-%m-%dT%H:%M:%S') AS run_job_id,
       coalesce(j.end_time, CASE WHEN i.submit_time > j.start_time THEN i.submit_time END,
                i.start_time, i.updated_at) AS run_end,
       j.end_time IS NULL AS was_open
FROM jobs j JOIN _slurm_incoming i ON j.cluster = i.cluster AND j.job_id = i.job_id
WHERE j.source = 'slurm-sacct' AND j.start_time IS NOT NULL
  AND (i.start_time IS NULL OR i.start_time > j.start_time)
