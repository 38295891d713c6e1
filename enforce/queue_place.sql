-- Where the newest plan that set this job's priority placed it among the jobs waiting on its
-- cluster: its rank (1 = started first) by the planned priority, then the earlier submission, then
-- the job id; how many waited; the plan's time. Waiting = the plan's figures said not running.
WITH mine AS (
    SELECT plan_id, planned_at
    FROM enforcement_audit
    WHERE cluster = $cluster AND job_id = $job AND action = 'set-priority' AND phase = 'planned'
    ORDER BY planned_at DESC, action_id DESC
    LIMIT 1
), waiting AS (
    SELECT a.job_id, a.priority, j.submit_time
    FROM enforcement_audit a
    JOIN mine m ON a.plan_id = m.plan_id
    LEFT JOIN jobs j ON j.cluster = a.cluster AND j.job_id = a.job_id
    WHERE a.cluster = $cluster AND a.action = 'set-priority' AND a.phase = 'planned'
      AND coalesce(json_extract(a.inputs, '$.running')::BOOLEAN, false) = false
), ranked AS (
    SELECT job_id, priority,
           row_number() OVER (ORDER BY priority DESC NULLS LAST, submit_time NULLS LAST, length(job_id), job_id) AS place,
           count(*) OVER () AS waiting
    FROM waiting
)
SELECT r.place, r.waiting, r.priority, m.planned_at
FROM ranked r, mine m
WHERE r.job_id = $job
