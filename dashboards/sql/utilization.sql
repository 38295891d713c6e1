-- Utilization of installed capacity per hour, cluster and GPU model (materialized by the pipelines).
SELECT hour, cluster, model, gpu_hours_capacity, gpu_hours_allocated, gpu_hours_active, gpu_hours_unknown,
       allocation_pct, active_pct, active_of_allocated_pct
FROM utilization_hourly
WHERE hour >= $start AND hour < $end
  AND (len($clusters::VARCHAR[]) = 0 OR list_contains($clusters::VARCHAR[], cluster))
ORDER BY hour, cluster, model
