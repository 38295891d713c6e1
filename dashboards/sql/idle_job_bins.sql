-- The heatmap's cells, pre-binned: held and idle GPU-hours of the jobs given per bin of $bin_hours
-- hours from the period's start (so the browser gets rows × bins numbers, not device-hours).
SELECT cluster || '/' || job_id AS job_key,
       time_bucket(to_hours($bin_hours::BIGINT), hour, $start::TIMESTAMP) AS bin,
       sum(gpu_hours_allocated) AS gpu_hours_held, sum(coalesce(gpu_hours_idle, 0)) AS gpu_hours_idle
FROM usage_hourly_jobs
WHERE hour >= $start AND hour < $end AND list_contains($job_keys::VARCHAR[], cluster || '/' || job_id)
GROUP BY ALL
ORDER BY job_key, bin
