-- Jobs submitted in [$start, $end) up to $now, with a Kueue Workload's admission (the first
-- QuotaReserved row of scheduler_reasons, migration 027: a Workload row has no start of its own).
SELECT j.cluster, j.job_id, j.scheduler_job, j.project, j.user_name, j.kind, j.gpu_model, j.gpus,
       j.time_limit_s, j.submit_time, j.start_time, j.end_time, j.state, j.source,
       a.admitted_at
FROM jobs j
LEFT JOIN (
    SELECT cluster, job_id, min(observed_at) AS admitted_at
    FROM {{ reasons }}
    WHERE reason = 'QuotaReserved'
    GROUP BY cluster, job_id
) a ON a.cluster = j.cluster AND a.job_id = j.job_id
WHERE j.submit_time >= $start AND j.submit_time < $end AND j.submit_time <= $now
  AND (len($projects::VARCHAR[]) = 0 OR list_contains($projects::VARCHAR[], j.project))
  -- a Kueue Workload's pods are created once it is admitted: its wait is the Workload row's, so
  -- they are left out (a pod names the job that owns it, as the Workload does)
  AND NOT (j.source = 'kubernetes' AND EXISTS (
      SELECT 1 FROM jobs w
      WHERE w.source = 'kueue' AND w.cluster = j.cluster AND w.namespace = j.namespace AND w.name = j.name))
ORDER BY j.submit_time, j.cluster, j.job_id
