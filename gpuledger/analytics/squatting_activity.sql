WITH d AS (SELECT gpu_id, bool_or(is_mig) AS is_mig FROM _squat_held GROUP BY gpu_id),
s AS MATERIALIZED (
    SELECT s.gpu_id, s.ts, s.fb_used_bytes AS fb, greatest({{ sample_weight }}, 1) AS n,
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
    SELECT h.k, g.sig, s.ts, s.fb, s.n, CASE g.sig WHEN 1 THEN s.sm WHEN 2 THEN s.gr ELSE s.util END AS act
    FROM _squat_held h JOIN sig g ON g.gpu_id = h.gpu_id
    JOIN s ON s.gpu_id = h.gpu_id AND s.ts >= h.judged_from
    WHERE CASE g.sig WHEN 1 THEN s.sm WHEN 2 THEN s.gr ELSE s.util END IS NOT NULL
),
-- The judged rows in the sustained window, each with the time to the next one (or to now); u:
-- the device's raw sample interval, the median over those rows of that time per raw sample the
-- row stands for (n), at most a minute (a lone raw reading vouches for no more). A row covers
-- n x u of the time up to the next row: sample_n x interval, as the rollups weight it.
g AS MATERIALIZED (
    SELECT k, n, coalesce(lead(epoch_us(ts)) OVER (PARTITION BY k ORDER BY ts), $now_us) - epoch_us(ts) AS gap
    FROM a WHERE ts >= $cov_from
),
u AS (SELECT k, least(60000000.0, median(gap / n)) AS u FROM g GROUP BY k),
cov AS (
    SELECT g.k, sum(least(g.gap, g.n * u.u)) / 60000000.0 AS covered_minutes
    FROM g JOIN u ON u.k = g.k GROUP BY g.k
),
per AS (
    SELECT k, any_value(sig) AS sig, max(ts) FILTER (WHERE act >= $thr) AS last_active,
           arg_max(fb, ts) FILTER (WHERE fb IS NOT NULL) AS fb_used_bytes
    FROM a GROUP BY k
)
SELECT per.k, per.sig, per.last_active, min(a.ts) AS idle_since,
       coalesce(cov.covered_minutes, 0.0) AS covered_minutes, per.fb_used_bytes
FROM per LEFT JOIN cov ON cov.k = per.k
LEFT JOIN a ON a.k = per.k AND a.ts > coalesce(per.last_active, '-infinity'::TIMESTAMP)
GROUP BY ALL
