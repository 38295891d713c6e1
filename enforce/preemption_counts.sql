-- Every job gpuledger preempted (enforcement_job_state), most often first, with why its latest
-- performed preemption was planned (the audit's planned reason of its newest done, real apply).
WITH last_done AS (
    SELECT a.cluster, a.job_id, arg_max(p.reason, a.recorded_at) AS why
    FROM enforcement_audit a
    JOIN enforcement_audit p ON p.action_id = a.action_id AND p.phase = 'planned'
    WHERE a.phase = 'applied' AND a.action = 'preempt' AND a.outcome = 'done' AND NOT a.dry_run
    GROUP BY ALL
)
SELECT s.cluster, s.job_id, s.preemptions, s.last_preempted_at, d.why
FROM enforcement_job_state s
LEFT JOIN last_done d USING (cluster, job_id)
WHERE s.preemptions > 0
ORDER BY s.preemptions DESC, s.cluster, s.job_id
