-- The held devices (_squat_check: gpu_id, sig = the best signal of the sustained window, 2 or 3)
-- that read a better signal in [$lo, $hi), the lookback before that window: sm_active (better
-- than either), gr_engine_active (better than gpu_util). NaN is no reading; gpu_util is never better.
SELECT DISTINCT s.gpu_id
FROM gpu_samples s JOIN _squat_check c ON s.gpu_id = c.gpu_id
WHERE s.ts >= $lo AND s.ts < $hi
  AND (NOT isnan(s.sm_active_ratio) OR (c.sig = 3 AND NOT isnan(s.gr_engine_active_ratio)))
