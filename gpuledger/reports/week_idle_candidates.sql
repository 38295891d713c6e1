-- Per (GPU, bucket of $step_s seconds from $origin) in [$lo, $hi): for each activity signal, how
-- many samples read it and how many of those are active (>= $thr). NaN reads as no reading, as in
-- analytics/squatting_activity.sql. reports/weekly.py finds from these, in one pass over the
-- week, the moments at which some held GPU could be idle through the sustained window.
SELECT gpu_id,
       time_bucket(to_seconds($step_s), ts, $origin) AS bucket,
       count(*) FILTER (WHERE NOT isnan(sm_active_ratio)) AS n_sm,
       count(*) FILTER (WHERE NOT isnan(sm_active_ratio) AND sm_active_ratio >= $thr) AS a_sm,
       count(*) FILTER (WHERE NOT isnan(gr_engine_active_ratio)) AS n_gr,
       count(*) FILTER (WHERE NOT isnan(gr_engine_active_ratio) AND gr_engine_active_ratio >= $thr) AS a_gr,
       count(*) FILTER (WHERE NOT isnan(gpu_util_ratio)) AS n_util,
       count(*) FILTER (WHERE NOT isnan(gpu_util_ratio) AND gpu_util_ratio >= $thr) AS a_util
FROM gpu_samples
WHERE ts >= $lo AND ts < $hi
GROUP BY ALL
