-- The open episodes of evaluation $at (episodes_as_of.sql) flagged not exempt, and the exempt
-- jobs' findings the same evaluation stored (squatting_exempt_findings, migration 018), in the
-- squatting report's order.
SELECT * FROM (
    SELECT *, false AS exempt, NULL::VARCHAR AS exempt_reason FROM (
{{ episodes }}
    )
    UNION ALL BY NAME
    SELECT * EXCLUDE (evaluated_at) FROM squatting_exempt_findings WHERE evaluated_at = $at
)
ORDER BY finding DESC, idle_minutes DESC NULLS LAST, cluster, job_id
