-- Per cluster, as of $now: the newest GPU sample (squatting evidence) and the newest job record
-- (submit / start / end event or ingest time; demand). Samples older than a day are not looked at:
-- data that old is stale for any limit, and the scan stays on the newest rows. A TSDB window's row
-- (migration 021) is stamped at its start and covers covered_ms after it: its data is as new as that.
WITH samples AS (
    SELECT g.cluster, max(least(s.ts + to_milliseconds(coalesce(s.covered_ms, 0)), $now)) AS samples_as_of
    FROM gpu_samples s JOIN gpus g USING (gpu_id)
    WHERE s.ts <= $now AND s.ts > $now - INTERVAL 1 DAY
    GROUP BY ALL),
job_events AS (
    SELECT cluster, max(t) AS jobs_as_of
    FROM (SELECT cluster, unnest([submit_time, start_time, end_time, updated_at]) AS t FROM jobs)
    WHERE t <= $now
    GROUP BY ALL)
SELECT coalesce(s.cluster, j.cluster) AS cluster, s.samples_as_of, j.jobs_as_of
FROM samples s FULL OUTER JOIN job_events j USING (cluster)
