-- The newest moment the samples cover, not after $wall: a row covers [ts, ts + covered_ms]
-- (migration 021): a window aggregate reaches its newest raw sample, a raw sample its own ts.
-- covered_ms is under 300 s (the longest window), so only rows from $lo = the newest ts - 300 s can
-- reach furthest; $lo as a value (not a subquery) lets the scan skip every older row group.
SELECT max(least(ts + to_milliseconds(coalesce(covered_ms, 0)), $wall))
FROM gpu_samples
WHERE ts >= $lo AND ts <= $wall
