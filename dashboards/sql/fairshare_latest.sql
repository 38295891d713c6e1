-- The newest fair-share snapshot at or before the period's end (the `sshare -l` view, queue order).
SELECT * EXCLUDE (materialized_at)
FROM fairshare_snapshots
WHERE as_of = (SELECT max(as_of) FROM fairshare_snapshots WHERE as_of <= $end)
ORDER BY queue_order
