-- The exempt jobs' findings of evaluation $at (NULL: the evaluation stored none, it predates 018),
-- as the squatting report gave them then.
SELECT f.* EXCLUDE (evaluated_at)
FROM squatting_exempt_evaluations e
LEFT JOIN squatting_exempt_findings f USING (evaluated_at)
WHERE e.evaluated_at = $at
ORDER BY f.cluster, f.job_id
