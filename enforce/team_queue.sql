-- A team's jobs not ended at $now (running or queued), each with its lead's choice (team_choices).
-- Order: running first, then the queued ones by the lead's position, declared priority, submission.
SELECT j.cluster, j.job_id, j.project, j.name, j.user_name, j.gpus, j.gpu_model, j.min_runtime_s,
       j.start_time IS NULL OR j.start_time > $now AS queued,
       t.position, t.fund_hours, t.fund_gpu_hours, coalesce(t.held, false) AS held, t.set_by, t.set_at
FROM jobs j
LEFT JOIN team_choices t USING (cluster, job_id)
WHERE list_contains($projects::VARCHAR[], j.project)
  AND coalesce(j.submit_time, j.start_time) <= $now
  AND (j.end_time IS NULL OR j.end_time > $now)
  AND (j.start_time IS NOT NULL OR j.state IS NULL
       OR upper(j.state) IN ('PENDING', 'QUEUED', 'SUSPENDED', 'ADMITTED', 'QUOTARESERVED', 'EVICTED'))
ORDER BY queued, t.position NULLS LAST, j.priority DESC NULLS LAST, j.submit_time, j.cluster, j.job_id
