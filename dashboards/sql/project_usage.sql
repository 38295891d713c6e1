-- Allocated, active and idle GPU-hours per project over the period (hourly project usage).
SELECT project, sum(gpu_hours_allocated) AS gpu_hours_allocated, sum(gpu_hours_active) AS gpu_hours_active,
       sum(gpu_hours_idle) AS gpu_hours_idle, sum(gpu_hours_unknown) AS gpu_hours_unknown
FROM usage_hourly_projects
WHERE hour >= $start AND hour < $end AND list_contains($projects::VARCHAR[], project)
GROUP BY project
ORDER BY project
