WITH s AS (
    SELECT gpu_id, ts, date_trunc('hour', ts) AS hour,
           sm_active_ratio, gr_engine_active_ratio, gpu_util_ratio, energy_total_j, sample_n
    FROM gpu_samples
    WHERE ts >= $lo AND ts < $hi
),
agg AS (
    SELECT gpu_id, hour,
           {gpu_hourly_aggregates}
    FROM s
    GROUP BY gpu_id, hour
),
-- Only hours whose minimum is below their first value can hold a drop; walk just those.
suspect AS (SELECT gpu_id, hour FROM agg WHERE e_min < e_first),
drops AS (
    SELECT gpu_id, hour, sum(prev) AS drop_sum
    FROM (
        SELECT s.gpu_id, s.hour, s.energy_total_j AS e,
               lag(s.energy_total_j) OVER (PARTITION BY s.gpu_id, s.hour ORDER BY s.ts) AS prev
        FROM s SEMI JOIN suspect USING (gpu_id, hour)
        WHERE s.energy_total_j IS NOT NULL
    )
    WHERE e < prev
    GROUP BY gpu_id, hour
)
SELECT agg.gpu_id, agg.hour, s_n, s_sm_active, s_gr_engine_active, s_gpu_util,
       s_n_sm_active, s_n_gr_engine_active, s_n_gpu_util, e_first, e_last,
       CASE WHEN e_first IS NULL THEN NULL ELSE e_last - e_first + coalesce(drop_sum, 0.0) END AS e_inside
FROM agg LEFT JOIN drops USING (gpu_id, hour)
