SELECT cluster, job_id, project, name, namespace, kind, source, user_name, gpus, gpu_model,
       start_time, submit_time, priority, scheduler_job, state, partition, qos, time_limit_s
FROM jobs
WHERE coalesce(submit_time, start_time) <= $now
  AND (end_time IS NULL OR end_time > $now)
  AND (start_time IS NOT NULL OR state IS NULL
       OR upper(state) IN ('PENDING', 'QUEUED', 'SUSPENDED', 'ADMITTED', 'QUOTARESERVED', 'EVICTED'))
ORDER BY cluster, job_id
