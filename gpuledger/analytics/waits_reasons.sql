-- The scheduler's reasons (migration 027) observed in [$since, $now].
SELECT cluster, job_id, observed_at, scheduler, reason, message
FROM scheduler_reasons
WHERE observed_at >= $since AND observed_at <= $now
