-- Squatting findings still open (not resolved by a later evaluation), worst first.
SELECT cluster, job_id, project, user_name, namespace, job_kind, finding, severity, gpus_idle, gpus_total,
       idle_since, idle_minutes, gpu_hours_idle, idle_cost, currency, fb_used_bytes_idle, activity_signal,
       first_seen, last_seen
FROM squatting_findings
WHERE resolved_at IS NULL
  AND (len($clusters::VARCHAR[]) = 0 OR list_contains($clusters::VARCHAR[], cluster))
ORDER BY CASE severity WHEN 'preempt-eligible' THEN 0 WHEN 'second-warning' THEN 1 WHEN 'warning' THEN 2 ELSE 3 END,
         idle_minutes DESC, cluster, job_id
