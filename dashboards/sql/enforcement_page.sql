-- One page of the enforcement audit in the period (no end: up to now), newest first, with the
-- page's filters applied here, so the browser gets the rows shown and not the whole trail.
SELECT planned_at, coalesce(json_extract_string(inputs, '$._target.name'), job_id) AS job_name, job_id, cluster,
       project, action, reason, phase, outcome, detail, priority, funded, dry_run,
       mode, rule, attempt, backend, cause, error, recorded_at, action_id, plan_id
FROM enforcement_audit
WHERE planned_at >= $start AND ($end::TIMESTAMP IS NULL OR planned_at < $end)
  AND (len($clusters::VARCHAR[]) = 0 OR list_contains($clusters::VARCHAR[], cluster))
  AND list_contains($projects::VARCHAR[], project)
  AND (len($actions::VARCHAR[]) = 0 OR list_contains($actions::VARCHAR[], action))
  AND (len($phases::VARCHAR[]) = 0 OR list_contains($phases::VARCHAR[], phase))
  AND (len($outcomes::VARCHAR[]) = 0 OR list_contains($outcomes::VARCHAR[], outcome))
  AND ($text = '' OR contains(job_id, $text) OR contains(coalesce(reason, ''), $text)
       OR contains(coalesce(detail, ''), $text))
ORDER BY planned_at DESC, action_id, phase, attempt
LIMIT $limit OFFSET $offset
