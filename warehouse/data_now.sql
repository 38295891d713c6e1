-- "Now" for the data, step 1: the newest sample's ts and the newest job event (submit, start, end),
-- neither after $wall. Step 2 (sample_coverage_end.sql) extends the first by the coverage of the
-- newest rows.
SELECT (SELECT max(ts) FROM gpu_samples WHERE ts <= $wall),
       (SELECT max(t) FROM (SELECT unnest([submit_time, start_time, end_time]) AS t FROM jobs) WHERE t <= $wall)
