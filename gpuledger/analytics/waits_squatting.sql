-- Squatting episodes (every GPU of a job idle) open at some time in [$since, $now], with the
-- squatter's pool (its GPU model).
SELECT f.cluster, f.job_id, j.gpu_model, f.gpus_idle, f.first_seen, f.resolved_at
FROM squatting_findings f
LEFT JOIN jobs j ON j.cluster = f.cluster AND j.job_id = f.job_id
WHERE f.finding = 'squatting' AND f.first_seen <= $now AND (f.resolved_at IS NULL OR f.resolved_at > $since)
