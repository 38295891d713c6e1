-- The jobs of a what-if range: submitted (else started) before its end, not ended by its start.
SELECT cluster, job_id, project, user_name, name, kind, namespace, gpu_model, gpus, min_runtime_s,
       coalesce(submit_time, start_time) AS submit_time, start_time, end_time, priority, source, time_limit_s
FROM jobs
WHERE coalesce(submit_time, start_time) < $end AND (end_time IS NULL OR end_time > $start)
ORDER BY cluster, job_id
