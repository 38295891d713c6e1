-- The squatting episodes open at evaluation $at, each with the finding and severity it had then:
-- the latest opened / severity-changed event at or before $at, else the episode's stored ones; in
-- the squatting report's order (the finding kind, the longest idle first, then cluster and job id).
-- Only the open episodes' events are read (a semi join, whose keys' range DuckDB also pushes into
-- the events scan): a month of history is ~100,000 closed episodes and ~300,000 events, and
-- grouping all of them cost `report squatters` ~55 ms (issue 41).
WITH open AS (
    SELECT * FROM squatting_findings
    WHERE first_seen <= $at AND (resolved_at IS NULL OR resolved_at > $at)
), latest AS (
    SELECT cluster, job_id, first_seen, arg_max(finding, event_time) AS finding, arg_max(severity, event_time) AS severity
    FROM squatting_finding_events
    SEMI JOIN open USING (cluster, job_id, first_seen)
    WHERE event IN ('opened', 'severity-changed') AND event_time <= $at
    GROUP BY cluster, job_id, first_seen
)
SELECT f.* REPLACE (
           coalesce(e.finding, f.finding) AS finding,
           coalesce(e.severity, f.severity) AS severity,
           CASE WHEN f.resolved_at IS NOT NULL AND f.resolved_at > $at THEN NULL ELSE f.resolved_at END AS resolved_at)
FROM open f
LEFT JOIN latest e USING (cluster, job_id, first_seen)
ORDER BY finding DESC, idle_minutes DESC NULLS LAST, cluster, job_id
