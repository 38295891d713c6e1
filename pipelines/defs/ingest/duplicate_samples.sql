-- (gpu_id, ts) keys held more than once among the samples of the last $hours hours of data.
WITH recent AS (
    SELECT gpu_id, ts FROM gpu_samples
    WHERE ts >= (SELECT max(ts) FROM gpu_samples) - to_hours(CAST($hours AS BIGINT))
)
SELECT count(*) AS duplicate_keys, coalesce(sum(copies), 0) AS extra_rows
FROM (SELECT gpu_id, ts, count(*) - 1 AS copies FROM recent GROUP BY gpu_id, ts HAVING count(*) > 1)
