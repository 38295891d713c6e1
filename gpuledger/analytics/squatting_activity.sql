WITH d AS (SELECT gpu_id, bool_or(is_mig) AS is_mig FROM _squat_held GROUP BY gpu_id),
s AS MATERIALIZED (
    SELECT s.gpu_id, s.ts, s.fb_used_bytes AS fb,
           CASE WHEN NOT isnan(s.sm_active_ratio) THEN s.sm_active_ratio END AS sm,
           CASE WHEN NOT isnan(s.gr_engine_active_ratio) THEN s.gr_engine_active_ratio END AS gr,
           CASE WHEN NOT d.is_mig AND NOT isnan(s.gpu_util_ratio) THEN s.gpu_util_ratio END AS util
    FROM gpu_samples s JOIN d ON s.gpu_id = d.gpu_id
    WHERE s.ts >= $lo AND s.ts < $now
),
sig AS (
    SELECT gpu_id,
           CASE WHEN count(sm) > 0 THEN 1 WHEN count(gr) > 0 THEN 2 WHEN count(util) > 0 THEN 3 END AS sig
    FROM s GROUP BY gpu_id
),
a AS MATERIALIZED (
    SELECT h.k, g.sig, s.ts, s.fb, CASE g.sig WHEN 1 THEN s.sm WHEN 2 THEN s.gr ELSE s.util END AS act
    FROM _squat_held h JOIN sig g ON g.gpu_id = h.gpu_id
    JOIN s ON s.gpu_id = h.gpu_id AND s.ts >= h.judged_from
    WHERE CASE g.sig WHEN 1 THEN s.sm WHEN 2 THEN s.gr ELSE s.util END IS NOT NULL
),
per AS (
    SELECT k, any_value(sig) AS sig, max(ts) FILTER (WHERE act >= $thr) AS last_active,
           coalesce(bit_count(bitstring_agg((epoch_us(ts) - $base_us) // 60000000, 0, $bits)
                              FILTER (WHERE ts >= $cov_from)), 0) AS covered_minutes,
           arg_max(fb, ts) FILTER (WHERE fb IS NOT NULL) AS fb_used_bytes
    FROM a GROUP BY k
)
SELECT per.k, per.sig, per.last_active, min(a.ts) AS idle_since, per.covered_minutes, per.fb_used_bytes
FROM per LEFT JOIN a ON a.k = per.k AND a.ts > coalesce(per.last_active, '-infinity'::TIMESTAMP)
GROUP BY ALL
