-- The materialized hourly usage per project in [$start, $end) (summed exactly in polars:
-- gpuledger.analytics.attribution.sum_usage).
SELECT project, gpu_hours_allocated, gpu_hours_active, gpu_hours_idle, gpu_hours_unknown, energy_kwh
FROM usage_hourly_projects
WHERE hour >= $start AND hour < $end
