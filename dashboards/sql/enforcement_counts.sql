-- The enforcement page's figures over every row its filters keep (not only the page shown), and
-- the values its pickers offer (over the period, before the pickers).
WITH period AS (
    SELECT action, phase, outcome, job_id, reason
    FROM enforcement_audit
    WHERE planned_at >= $start AND ($end::TIMESTAMP IS NULL OR planned_at < $end)
      AND (len($clusters::VARCHAR[]) = 0 OR list_contains($clusters::VARCHAR[], cluster))
      AND list_contains($projects::VARCHAR[], project)
),
kept AS (
    SELECT * FROM period
    WHERE (len($actions::VARCHAR[]) = 0 OR list_contains($actions::VARCHAR[], action))
      AND (len($phases::VARCHAR[]) = 0 OR list_contains($phases::VARCHAR[], phase))
      AND (len($outcomes::VARCHAR[]) = 0 OR list_contains($outcomes::VARCHAR[], outcome))
      AND ($text = '' OR contains(job_id, $text) OR contains(coalesce(reason, ''), $text))
)
SELECT (SELECT count(*) FROM kept) AS rows_kept,
       (SELECT count(*) FILTER (WHERE phase = 'planned') FROM kept) AS rows_planned,
       (SELECT count(*) FILTER (WHERE phase = 'applied') FROM kept) AS rows_applied,
       (SELECT count(*) FROM period) AS rows_period,
       (SELECT list(DISTINCT action ORDER BY action) FROM period) AS actions,
       (SELECT list(DISTINCT phase ORDER BY phase) FROM period) AS phases,
       (SELECT list(DISTINCT outcome ORDER BY outcome) FROM period) AS outcomes
