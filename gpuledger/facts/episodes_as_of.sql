-- The squatting episodes open at evaluation $at, each with the finding and severity it had then:
-- the latest opened / severity-changed event at or before $at, else the episode's stored ones; in
-- the squatting report's order (the finding kind, the longest idle first, then cluster and job id).
SELECT f.* REPLACE (
           coalesce(e.finding, f.finding) AS finding,
           coalesce(e.severity, f.severity) AS severity,
           CASE WHEN f.resolved_at IS NOT NULL AND f.resolved_at > $at THEN NULL ELSE f.resolved_at END AS resolved_at)
FROM squatting_findings f
LEFT JOIN (
    SELECT cluster, job_id, first_seen, arg_max(finding, event_time) AS finding, arg_max(severity, event_time) AS severity
    FROM squatting_finding_events
    WHERE event IN ('opened', 'severity-changed') AND event_time <= $at
    GROUP BY cluster, job_id, first_seen
) e USING (cluster, job_id, first_seen)
WHERE f.first_seen <= $at AND (f.resolved_at IS NULL OR f.resolved_at > $at)
ORDER BY finding DESC, idle_minutes DESC NULLS LAST, cluster, job_id
