-- The newest moment a source's samples reach (naive UTC), NULL when it has written none: a raw
-- sample's own time, a window aggregate's coverage end (ts + covered_ms, which is under 300 s).
WITH newest AS (SELECT max(ts) AS t FROM gpu_samples WHERE source = $source)
SELECT max(s.ts + to_milliseconds(coalesce(s.covered_ms, 0))) AS newest
FROM gpu_samples s, newest
WHERE s.source = $source AND s.ts >= newest.t - INTERVAL 300 SECOND
