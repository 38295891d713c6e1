-- Every enforcement row of the jobs given (any time), newest first.
SELECT planned_at, phase, attempt, action, outcome, cluster, job_id, project, reason, priority, dry_run, backend
FROM enforcement_audit
WHERE list_contains($job_keys::VARCHAR[], cluster || '/' || job_id)
ORDER BY planned_at DESC, action_id, phase, attempt
