-- Squatting findings still open (not resolved by a later evaluation). The page's order (worst
-- first) and its cluster filter are applied to these few rows in polars: in SQL they cost more
-- (~0.3 ms of planning) than the rest of the question.
SELECT cluster, job_id, project, user_name, namespace, job_kind, finding, severity, gpus_idle, gpus_total,
       idle_since, idle_minutes, gpu_hours_idle, idle_cost, currency, fb_used_bytes_idle, activity_signal,
       first_seen, last_seen
FROM squatting_findings
WHERE resolved_at IS NULL
