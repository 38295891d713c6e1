-- 008: a job's identity is one run, its name is the scheduler's. A pod recreated under the same
-- name (StatefulSets, operators) is a new job: job_id is the pod uid; a requeued Slurm job's
-- earlier run keeps its own row. `scheduler_job` is the name the scheduler and DCGM's labels use
-- (namespace/pod, the Slurm JobID) — shown to people and matched to samples by time, not unique.
ALTER TABLE jobs ADD COLUMN scheduler_job VARCHAR;
UPDATE jobs SET scheduler_job = job_id WHERE source <> 'kueue';
