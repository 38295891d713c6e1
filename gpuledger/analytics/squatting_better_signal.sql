-- The held devices (_squat_check: gpu_id, sig = the best signal of the sustained window, 2 or 3)
-- that read a better signal in [$lo, $hi), the lookback before that window: sm_active (better
-- than either), gr_engine_active (better than gpu_util). NaN is no reading; gpu_util is never
-- better. Each branch filters one column IS NOT NULL in the scan, so a fleet that never reports
-- sm_active (dcgm-exporter's default) skips its all-NULL row groups instead of reading them.
SELECT s.gpu_id FROM gpu_samples s JOIN _squat_check c ON s.gpu_id = c.gpu_id
WHERE s.ts >= $lo AND s.ts < $hi AND s.sm_active_ratio IS NOT NULL AND NOT isnan(s.sm_active_ratio)
UNION
SELECT s.gpu_id FROM gpu_samples s JOIN _squat_check c ON s.gpu_id = c.gpu_id
WHERE c.sig = 3 AND s.ts >= $lo AND s.ts < $hi
  AND s.gr_engine_active_ratio IS NOT NULL AND NOT isnan(s.gr_engine_active_ratio)
