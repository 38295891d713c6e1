-- The batch's part of gpu_hourly: per (gpu_id, hour) the aggregates of a batch's new rows
-- (_new_samples, none of them stored yet) and whether they can be folded into the stored rollup
-- row (`fold`) or the hour must be aggregated again from gpu_samples. The aggregates are
-- gpu_hourly_aggregates.sql, as in gpu_hourly_select.sql (an hour is walked for resets only when
-- its minimum is below its first value); tests/warehouse/test_writes.py holds the two paths equal.
-- Read before the new rows are inserted. $lo, $hi: the whole hours of the new rows, $first: their
-- first ts (ranges DuckDB prunes row groups by); $stored_after: false when no row is stored from
-- $first to $hi (a new scrape round), which spares DuckDB planning that look.
-- The fold (gpu_hourly_fold.sql) and the list of the hours not folded (rollups.gpu_hourly_kept)
-- read it as a subquery.
WITH agg AS (
    SELECT gpu_id, date_trunc('hour', ts) AS hour, min(ts) AS t_min,
           {gpu_hourly_aggregates}
    FROM _new_samples
    GROUP BY ALL
),
-- the stored rows of the touched hours from the batch's first ts on: are new rows among them?
stored AS (
    SELECT gpu_id, date_trunc('hour', ts) AS hour, max(ts) AS t_max
    FROM gpu_samples WHERE $stored_after AND ts >= $first AND ts < $hi
    GROUP BY ALL
)
SELECT a.*,
       -- Folding is exact when the hour's stored row exists, every new row is later than the
       -- hour's stored ones, and no reset walk is needed: the stored hour was not walked with
       -- drops (its e_inside is last − first) and no new value falls below the hour's first
       -- (then the combined hour's minimum is its first value, and e_inside is last − first).
       h.gpu_id IS NOT NULL
       AND coalesce(st.t_max < a.t_min, true)
       AND (h.e_first IS NULL OR h.e_inside = h.e_last - h.e_first)
       AND (a.e_min IS NULL OR a.e_min >= coalesce(h.e_first, a.e_first)) AS fold
FROM agg a
LEFT JOIN (SELECT * FROM gpu_hourly WHERE hour >= $lo AND hour < $hi) h USING (gpu_id, hour)
LEFT JOIN stored st USING (gpu_id, hour)
