-- Planned and applied enforcement actions whose cycle falls in the period (no end: up to now), newest first.
SELECT planned_at, recorded_at, phase, attempt, action, outcome, cluster, job_id, project, reason, rule,
       priority, mode, funded, dry_run, backend, detail, cause, error, action_id, plan_id
FROM enforcement_audit
WHERE planned_at >= $start AND ($end::TIMESTAMP IS NULL OR planned_at < $end)
  AND (len($clusters::VARCHAR[]) = 0 OR list_contains($clusters::VARCHAR[], cluster))
ORDER BY planned_at DESC, action_id, phase, attempt
