-- Each pod's own evidence on a shared device (pod_gpu_samples: dcgm-exporter's virtual-GPU mode),
-- for the held (job, device) rows k of _squat_pods (k, gpu_id, scheduler_job, judged_from): the
-- same figures squatting_activity.sql gives a device — last sample at or above the idle
-- threshold, the first judged sample after it, the minutes the sustained window's samples cover
-- (each vouches for at most a minute, never past the next one or now), the pod's last memory.
WITH p AS MATERIALIZED (
    SELECT h.k, s.ts, s.gpu_util_ratio AS act, s.fb_used_bytes AS fb
    FROM _squat_pods h JOIN pod_gpu_samples s
      ON s.gpu_id = h.gpu_id AND s.namespace || '/' || s.pod = h.scheduler_job
    WHERE s.ts >= h.judged_from AND s.ts < $now AND s.gpu_util_ratio IS NOT NULL
),
g AS (
    SELECT k, coalesce(lead(epoch_us(ts)) OVER (PARTITION BY k ORDER BY ts), $now_us) - epoch_us(ts) AS gap
    FROM p WHERE ts >= $cov_from
),
cov AS (SELECT k, sum(least(gap, 60000000)) / 60000000.0 AS covered_minutes FROM g GROUP BY k),
per AS (
    SELECT k, max(ts) FILTER (WHERE act >= $thr) AS last_active,
           arg_max(fb, ts) FILTER (WHERE fb IS NOT NULL) AS fb_used_bytes
    FROM p GROUP BY k
)
SELECT per.k, per.last_active, min(p.ts) AS idle_since, coalesce(cov.covered_minutes, 0.0) AS covered_minutes,
       per.fb_used_bytes
FROM per LEFT JOIN cov ON cov.k = per.k
LEFT JOIN p ON p.k = per.k AND p.ts > coalesce(per.last_active, '-infinity'::TIMESTAMP)
GROUP BY ALL
ORDER BY per.k
