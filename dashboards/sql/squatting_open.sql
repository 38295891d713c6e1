-- Squatting findings still open (not resolved by a later evaluation). The page's order (worst
-- first) and its cluster filter are applied to these few rows in polars: in SQL they cost more
-- (~0.3 ms of planning) than the rest of the question.
SELECT f.cluster, f.job_id, coalesce(j.name, f.job_id) AS job_name, f.project, f.user_name, f.namespace,
       f.job_kind, f.finding, f.severity, f.gpus_idle, f.gpus_total, f.idle_since, f.idle_minutes, f.gpu_hours_idle,
       f.idle_cost, f.currency, f.fb_used_bytes_idle, f.activity_signal, f.first_seen, f.last_seen
FROM squatting_findings f
LEFT JOIN jobs j ON j.cluster = f.cluster AND j.job_id = f.job_id
WHERE f.resolved_at IS NULL
