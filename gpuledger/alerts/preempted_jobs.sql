-- Jobs gpuledger preempted for real (enforcement_audit: an applied, not dry-run preemption that was
-- done) since $since, with who owns them and what they held: what the owner is told (alerts.plan).
SELECT a.action_id, a.cluster, a.job_id, a.project, a.recorded_at AS preempted_at, a.mode, a.rule, a.backend,
       p.reason, j.user_name, j.name, j.scheduler_job, j.namespace, j.source, j.gpus, j.gpu_model, j.start_time
FROM enforcement_audit a
JOIN enforcement_audit p ON p.action_id = a.action_id AND p.phase = 'planned'
LEFT JOIN jobs j ON j.cluster = a.cluster AND j.job_id = a.job_id
WHERE a.phase = 'applied' AND a.action = 'preempt' AND a.outcome = 'done' AND NOT a.dry_run
  AND a.recorded_at >= $since
ORDER BY a.recorded_at, a.action_id
