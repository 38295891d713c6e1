-- 015: a row of gpu_samples may stand for many raw samples (issue 20): `ingest prometheus
-- --aggregate 5m` stores one row per GPU and 5-minute window (the window's average activity, its
-- peak memory, the counter's last energy reading) with the number of raw samples it averages.
-- The rollups and attribution weight each row by it (NULL: one raw sample), so a 5-minute average
-- and the raw samples behind it give the same active GPU-hours.
ALTER TABLE gpu_samples ADD COLUMN sample_n INTEGER;
