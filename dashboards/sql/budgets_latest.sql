-- The newest budget snapshot at or before the period's end: per node and budget period.
SELECT * EXCLUDE (materialized_at)
FROM budget_snapshots
WHERE as_of = (SELECT max(as_of) FROM budget_snapshots WHERE as_of <= $end)
ORDER BY node, period_start
