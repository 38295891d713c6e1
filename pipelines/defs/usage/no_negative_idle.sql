-- Rows of a usage table whose idle GPU-hours are below zero (beyond float noise), and the worst.
SELECT count(*) AS negative_rows, coalesce(min(gpu_hours_idle), 0) AS lowest_idle
FROM query_table($table_name)
WHERE gpu_hours_idle < -1e-9
