-- Per (device, hour) of [$lo, $cutoff): samples stored (n) vs counted in the rollup (s_n).
SELECT c.gpu_id, c.hour, c.n, h.s_n
FROM (SELECT gpu_id, date_trunc('hour', ts) AS hour, count(*) AS n FROM gpu_samples
      WHERE ts >= $lo AND ts < $cutoff GROUP BY ALL) c
LEFT JOIN gpu_hourly h USING (gpu_id, hour)
