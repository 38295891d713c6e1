-- Every warning planned (enforcement_warnings) with when it reached someone: the first real
-- (not dry-run) apply that performed its action.
SELECT w.cluster, w.job_id, w.idle_since, w.stage, w.warned_at,
       (SELECT min(a.recorded_at) FROM enforcement_audit a
        WHERE a.action_id = w.action_id AND a.phase = 'applied' AND NOT a.dry_run AND a.outcome = 'done') AS delivered_at
FROM enforcement_warnings w
ORDER BY w.warned_at
