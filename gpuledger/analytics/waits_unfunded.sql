-- Why enforcement left a job unfunded: its latest planned priority in [$since, $now] that was
-- unfunded, the reason's words in brackets ("unfunded (budget exhausted at proj-a)").
SELECT cluster, job_id,
       regexp_extract(arg_max(reason, planned_at), 'unfunded \(([^)]*)\)', 1) AS unfunded_reason
FROM enforcement_audit
WHERE action = 'set-priority' AND phase = 'planned' AND funded = false
  AND planned_at >= $since AND planned_at <= $now
GROUP BY cluster, job_id
