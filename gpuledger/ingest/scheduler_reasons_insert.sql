-- The incoming reasons (_reasons_in) that are news: per job in time order, a row whose reason and
-- message differ from the one before it (stored or incoming), and never one already stored.
INSERT OR IGNORE INTO scheduler_reasons
WITH incoming AS (
    SELECT DISTINCT ON (cluster, job_id, observed_at, reason) * FROM _reasons_in
), merged AS (
    SELECT cluster, job_id, observed_at, scheduler, state, reason, message, source, false AS is_new
    FROM scheduler_reasons
    WHERE (cluster, job_id) IN (SELECT cluster, job_id FROM incoming)
    UNION ALL
    SELECT cluster, job_id, observed_at, scheduler, state, reason, message, source, true AS is_new FROM incoming
), ordered AS (
    SELECT *, lag(reason) OVER w AS reason_before, lag(message) OVER w AS message_before
    FROM merged
    WINDOW w AS (PARTITION BY cluster, job_id ORDER BY observed_at, is_new)
)
SELECT cluster, job_id, observed_at, scheduler, state, reason, message, source
FROM ordered
WHERE is_new
  AND (reason_before IS NULL OR reason IS DISTINCT FROM reason_before OR message IS DISTINCT FROM message_before)
