-- The materialized utilization per cluster, GPU model and hour of [$start, $end): the rows of
-- queries.utilization_report(by="model") as the pipeline stored them per UTC day, in its column
-- and row order (hour, cluster, model).
SELECT cluster, model, hour, gpu_hours_capacity, gpu_hours_allocated, gpu_hours_active, gpu_hours_unknown,
       allocation_pct, active_pct, active_of_allocated_pct
FROM utilization_hourly
WHERE hour >= $start AND hour < $end
ORDER BY hour, cluster, model
