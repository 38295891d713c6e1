-- The materialized utilization of [$start, $end) per hour summed over GPU models: per cluster
-- ({{ keys }} = cluster,) or for the whole fleet ({{ keys }} empty), in the columns and row order of
-- queries.utilization_report(by="cluster" | "fleet"). Each figure is summed in whole nano-units
-- (1e-9 GPU-hour, rounded half to even as polars rounds) as integers, the rule of
-- analytics.utilization.utilization_over_models, so the digits are the range computation's; the
-- percentages as analytics.utilization._pct: 100 × part ÷ whole, NULL unless the whole is positive.
WITH nano AS (
    SELECT {{ keys }} hour,
           CAST(round_even(gpu_hours_capacity * 1e9, 0) AS BIGINT) AS capacity,
           CAST(round_even(gpu_hours_allocated * 1e9, 0) AS BIGINT) AS allocated,
           CAST(round_even(gpu_hours_active * 1e9, 0) AS BIGINT) AS active,
           CAST(round_even(gpu_hours_unknown * 1e9, 0) AS BIGINT) AS unknown
    FROM utilization_hourly
    WHERE hour >= $start AND hour < $end
), figures AS (
    SELECT {{ keys }} hour,
           CAST(sum(capacity) AS DOUBLE) / 1e9 AS gpu_hours_capacity,
           CAST(sum(allocated) AS DOUBLE) / 1e9 AS gpu_hours_allocated,
           CAST(sum(active) AS DOUBLE) / 1e9 AS gpu_hours_active,
           CAST(sum(unknown) AS DOUBLE) / 1e9 AS gpu_hours_unknown
    FROM nano GROUP BY {{ keys }} hour
)
SELECT *,
       CASE WHEN gpu_hours_capacity > 0 THEN 100.0::DOUBLE * gpu_hours_allocated / gpu_hours_capacity END AS allocation_pct,
       CASE WHEN gpu_hours_capacity > 0 THEN 100.0::DOUBLE * gpu_hours_active / gpu_hours_capacity END AS active_pct,
       CASE WHEN gpu_hours_allocated - gpu_hours_unknown > 0
            THEN 100.0::DOUBLE * gpu_hours_active / (gpu_hours_allocated - gpu_hours_unknown) END AS active_of_allocated_pct
FROM figures
ORDER BY hour, {{ keys }} gpu_hours_capacity, gpu_hours_allocated, gpu_hours_active, gpu_hours_unknown
