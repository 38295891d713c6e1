-- Every warning planned (enforcement_warnings) with when it reached someone: the first real
-- (not dry-run) apply that performed its action, or the first squatting alert about the job sent
-- (gpuledger.alerts' outbox) during the same idle episode — whichever came first.
WITH applied AS (
    SELECT action_id, min(recorded_at) AS at FROM enforcement_audit
    WHERE phase = 'applied' AND NOT dry_run AND outcome = 'done' AND action = 'warn'
    GROUP BY ALL),
alerted AS (
    SELECT json_extract_string(payload_json, '$.cluster') AS cluster,
           json_extract_string(payload_json, '$.job_id') AS job_id, sent_at
    FROM alert_outbox WHERE kind = 'squatting' AND status = 'sent' AND sent_at IS NOT NULL)
SELECT w.cluster, w.job_id, w.idle_since, w.stage, w.warned_at,
       least(a.at, (SELECT min(s.sent_at) FROM alerted s
                    WHERE s.cluster = w.cluster AND s.job_id = w.job_id AND s.sent_at >= w.idle_since)) AS delivered_at
FROM enforcement_warnings w LEFT JOIN applied a USING (action_id)
ORDER BY w.warned_at
