-- Jobs not finished at $now (the period's end, or the data's "now" when sooner): running (started) or queued, with the newest planned
-- priority and its reason from the enforcement audit when there is one.
WITH latest AS (
    SELECT cluster, job_id, priority AS planned_priority, reason AS priority_reason, funded,
           planned_at AS priority_planned_at
    FROM enforcement_audit
    WHERE action = 'set-priority' AND phase = 'planned'
    QUALIFY row_number() OVER (PARTITION BY cluster, job_id ORDER BY planned_at DESC, action_id DESC) = 1
)
SELECT j.cluster, j.job_id, j.project, j.user_name, j.name, j.kind, j.gpus, j.gpu_model, j.state,
       CASE WHEN j.start_time IS NOT NULL AND j.start_time <= $now THEN 'running' ELSE 'queued' END AS status,
       j.submit_time, j.start_time, j.min_runtime_s, j.priority AS declared_priority,
       l.planned_priority, l.funded, l.priority_reason, l.priority_planned_at
FROM jobs j
LEFT JOIN latest l ON l.cluster = j.cluster AND l.job_id = j.job_id
WHERE (j.end_time IS NULL OR j.end_time > $now)
  AND coalesce(j.submit_time, j.start_time) <= $now
  AND list_contains($projects::VARCHAR[], j.project)
  AND (len($clusters::VARCHAR[]) = 0 OR list_contains($clusters::VARCHAR[], j.cluster))
-- queue order: priority first, then the earlier submission (never the job id's text)
ORDER BY status DESC, coalesce(l.planned_priority, j.priority) DESC NULLS LAST,
         coalesce(j.submit_time, j.start_time), j.cluster, length(j.job_id), j.job_id
