-- Every job that held GPUs at some time in [$since, $now]: the work that may have overtaken a
-- waiting job, or filled its pool when it was submitted.
SELECT cluster, job_id, gpu_model, gpus, submit_time, start_time, end_time
FROM jobs
WHERE start_time IS NOT NULL AND start_time <= $now AND (end_time IS NULL OR end_time > $since)
