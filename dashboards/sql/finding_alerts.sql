-- The squatting alerts of the jobs given (`cluster/job_id`) from the outbox, oldest first: a
-- finding's history beside its lifecycle events and enforcement rows.
SELECT created_at, kind, severity, channel, recipient, status, attempts, sent_at, subject,
       coalesce(json_extract_string(payload_json, '$.cluster'), '') || '/' ||
       json_extract_string(payload_json, '$.job_id') AS job_key
FROM alert_outbox
WHERE kind = 'squatting'
  AND list_contains($job_keys::VARCHAR[], coalesce(json_extract_string(payload_json, '$.cluster'), '') || '/' ||
                                          json_extract_string(payload_json, '$.job_id'))
ORDER BY created_at
