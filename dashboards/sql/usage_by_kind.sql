-- Allocated and active GPU-hours per hour and workload kind (jobs' `kind`), from the hourly job usage.
SELECT u.hour, coalesce(j.kind, '(not given)') AS kind,
       sum(u.gpu_hours_allocated) AS gpu_hours_allocated, sum(u.gpu_hours_active) AS gpu_hours_active
FROM usage_hourly_jobs u
LEFT JOIN jobs j ON j.cluster = u.cluster AND j.job_id = u.job_id
WHERE u.hour >= $start AND u.hour < $end
  AND (len($clusters::VARCHAR[]) = 0 OR list_contains($clusters::VARCHAR[], u.cluster))
GROUP BY ALL
ORDER BY 1, 2
