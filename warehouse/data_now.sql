-- "Now" for the data: the newest moment the samples cover, or job event (submit, start, end), not
-- after $wall. A row covers [ts, ts + covered_ms] (migration 021): a window aggregate reaches its
-- newest raw sample, a raw sample its own ts. covered_ms is under 300 s (the longest window), so
-- only rows within 300 s of the newest ts can reach furthest: the scan stays on the newest rows.
WITH newest AS (SELECT max(ts) AS ts FROM gpu_samples WHERE ts <= $wall)
SELECT greatest((SELECT max(least(s.ts + to_milliseconds(coalesce(s.covered_ms, 0)), $wall))
                 FROM gpu_samples s, newest
                 WHERE s.ts <= $wall AND s.ts >= newest.ts - INTERVAL 300 SECOND),
                (SELECT max(t) FROM (SELECT unnest([submit_time, start_time, end_time]) AS t FROM jobs)
                 WHERE t <= $wall))
