-- The materialized hourly usage in [$start, $end) summed by {{ keys }} (a project from
-- usage_hourly_projects; a job or a user from usage_hourly_jobs), by the rule of
-- gpuledger.analytics.attribution.sum_usage, so the digits are the range computation's: each
-- figure in whole nano-units (1e-9 GPU-hour / kWh, rounded half to even as polars rounds) summed
-- as integers, energy NULL where no hour has any; efficiency = active ÷ (allocated − unknown),
-- NULL unless that is positive. Ordered as queries.usage_report: most allocated first, then by
-- the keys (NULLs last). tests/facts/test_read_model.py holds it to the computed answer exactly.
WITH nano AS (
    SELECT {{ keys }},
           CAST(round_even(gpu_hours_allocated * 1e9, 0) AS BIGINT) AS allocated,
           CAST(round_even(gpu_hours_active * 1e9, 0) AS BIGINT) AS active,
           CAST(round_even(gpu_hours_idle * 1e9, 0) AS BIGINT) AS idle,
           CAST(round_even(gpu_hours_unknown * 1e9, 0) AS BIGINT) AS unknown,
           CAST(round_even(energy_kwh * 1e9, 0) AS BIGINT) AS energy
    FROM "{{ table }}"
    WHERE hour >= $start AND hour < $end
), sums AS (
    SELECT {{ keys }}, sum(allocated) AS allocated, sum(active) AS active, sum(idle) AS idle,
           sum(unknown) AS unknown, sum(energy) AS energy
    FROM nano GROUP BY {{ keys }}
), figures AS (
    SELECT {{ keys }}, CAST(allocated AS DOUBLE) / 1e9 AS gpu_hours_allocated,
           CAST(active AS DOUBLE) / 1e9 AS gpu_hours_active, CAST(idle AS DOUBLE) / 1e9 AS gpu_hours_idle,
           CAST(unknown AS DOUBLE) / 1e9 AS gpu_hours_unknown, CAST(energy AS DOUBLE) / 1e9 AS energy_kwh
    FROM sums
)
SELECT *,
       CASE WHEN gpu_hours_allocated - gpu_hours_unknown > 0
            THEN gpu_hours_active / (gpu_hours_allocated - gpu_hours_unknown) END AS efficiency_ratio
FROM figures
ORDER BY gpu_hours_allocated DESC NULLS LAST, {{ order }}
