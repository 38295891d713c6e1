-- Idle GPU-hours per user of the projects given over the period (hourly job usage), most first.
SELECT project, user_name, sum(gpu_hours_allocated) AS gpu_hours_allocated, sum(gpu_hours_idle) AS gpu_hours_idle
FROM usage_hourly_jobs
WHERE hour >= $start AND hour < $end AND list_contains($projects::VARCHAR[], project)
  AND (len($clusters::VARCHAR[]) = 0 OR list_contains($clusters::VARCHAR[], cluster))
GROUP BY ALL
ORDER BY gpu_hours_idle DESC NULLS LAST, project, user_name
