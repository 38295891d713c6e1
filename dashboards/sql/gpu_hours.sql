-- One row per device (a whole GPU or a MIG instance) and hour: its activity from the gpu_hourly
-- rollup (the best signal it reports: SM active, else graphics engine active, else GPU util) and
-- the share of the hour a job held it (job_allocations, capped at the data's "now").
WITH devices AS (
    SELECT gpu_id, cluster, host, gpu_index, model, mig_profile, mig_instance_id, gpu_fraction
    FROM gpus
    WHERE (len($clusters::VARCHAR[]) = 0 OR list_contains($clusters::VARCHAR[], cluster))
      AND (NOT $mig_only OR mig_profile IS NOT NULL)
),
activity AS (
    SELECT h.gpu_id, h.hour,
           CASE WHEN h.s_n_sm_active > 0 THEN h.s_sm_active / h.s_n_sm_active
                WHEN h.s_n_gr_engine_active > 0 THEN h.s_gr_engine_active / h.s_n_gr_engine_active
                WHEN h.s_n_gpu_util > 0 THEN h.s_gpu_util / h.s_n_gpu_util END AS activity_ratio
    FROM gpu_hourly h SEMI JOIN devices d ON d.gpu_id = h.gpu_id
    WHERE h.hour >= $start AND h.hour < $end
),
hours AS (
    SELECT range AS hour FROM range($start::TIMESTAMP, least($end::TIMESTAMP, $now::TIMESTAMP), INTERVAL 1 HOUR)
),
held AS (
    SELECT a.gpu_id, hours.hour,
           least(sum(epoch(least(coalesce(a.end_time, $now::TIMESTAMP), hours.hour + INTERVAL 1 HOUR)
                           - greatest(a.start_time, hours.hour)) / 3600.0 * a.gpu_fraction), 1.0) AS held_fraction
    FROM job_allocations a SEMI JOIN devices d ON d.gpu_id = a.gpu_id
    JOIN hours ON a.start_time < hours.hour + INTERVAL 1 HOUR
              AND coalesce(a.end_time, $now::TIMESTAMP) > hours.hour
    GROUP BY ALL
)
SELECT d.gpu_id, d.cluster, d.host, d.gpu_index, d.model, d.mig_profile, d.gpu_fraction, hours.hour,
       act.activity_ratio, coalesce(held.held_fraction, 0.0) AS held_fraction
FROM devices d CROSS JOIN hours
LEFT JOIN activity act ON act.gpu_id = d.gpu_id AND act.hour = hours.hour
LEFT JOIN held ON held.gpu_id = d.gpu_id AND held.hour = hours.hour
ORDER BY d.cluster, d.host, d.gpu_index, d.mig_instance_id, hours.hour
