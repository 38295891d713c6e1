-- A finding's lifecycle events, for the jobs given.
SELECT cluster, job_id, first_seen, event_time, event, finding, severity, idle_minutes
FROM squatting_finding_events
WHERE list_contains($job_keys::VARCHAR[], cluster || '/' || job_id)
ORDER BY cluster, job_id, event_time, event
