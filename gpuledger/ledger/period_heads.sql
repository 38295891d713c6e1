-- Closed months, one row each: how many revisions, who closed it and when, and the last
-- revision's time, who, reason, config version and checksum (ledger.periods.period_list).
SELECT r0.period, count(*)::INTEGER AS revisions, min(r.issued_at) AS closed_at,
       arg_min(r.issued_by, r.revision) AS closed_by, max(r.issued_at) AS last_issued_at,
       arg_max(r.issued_by, r.revision) AS last_issued_by, arg_max(r.reason, r.revision) AS last_reason,
       arg_max(r.config_version, r.revision) AS config_version,
       arg_max(r.lines_sha256, r.revision) AS last_sha256
FROM statement_revisions r0 JOIN statement_revisions r USING (period)
WHERE r0.revision = 0 GROUP BY r0.period, r0.revision
