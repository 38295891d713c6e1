-- Per job and hour of its runtime: the mean over the devices it held of their activity in the
-- gpu_hourly rollup (the best signal each reports: the fragment activity_ratio, gpuledger.rules.activity).
SELECT a.cluster, a.job_id,
       CAST(floor(epoch(h.hour - date_trunc('hour', j.start_time)) / 3600) AS BIGINT) AS run_hour,
       avg({{ activity_ratio }}) AS activity
FROM job_allocations a
JOIN jobs j ON j.cluster = a.cluster AND j.job_id = a.job_id
JOIN gpus g ON g.gpu_id = a.gpu_id
JOIN gpu_hourly h ON h.gpu_id = a.gpu_id AND h.hour >= date_trunc('hour', a.start_time)
     AND h.hour < coalesce(a.end_time, $end)
WHERE j.start_time IS NOT NULL AND coalesce(j.submit_time, j.start_time) < $end
  AND (j.end_time IS NULL OR j.end_time > $start) AND h.hour >= $start AND h.hour < $end
GROUP BY ALL
