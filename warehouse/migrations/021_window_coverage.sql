-- 021: how far in time a row of gpu_samples reaches (issue 41). A window aggregate (`ingest
-- prometheus --aggregate 5m`) stays stamped at its window's start, and covered_ms says how many
-- milliseconds after ts its newest raw sample lies: its raw samples lie in [ts, ts + covered_ms].
-- "Now" for the data is the end of that coverage (warehouse/clock.py), so the last window no
-- longer looks one window staler than the samples it stands for. NULL: a raw sample (it covers its
-- own moment), or a window whose newest sample the server did not say (counted at its start).
ALTER TABLE gpu_samples ADD COLUMN covered_ms INTEGER;
-- Aggregates written before this held the samples of (ts, ts + step] (one window a device apart,
-- 1 to 5 minutes): their newest sample lies a step after ts. The step is the smallest gap between
-- a device's aggregated rows; a device with a single aggregated row keeps NULL. Every row is kept.
UPDATE gpu_samples SET covered_ms = steps.step_ms
FROM (SELECT gpu_id, min(gap_ms) AS step_ms
      FROM (SELECT gpu_id, datediff('millisecond', ts, lead(ts) OVER (PARTITION BY gpu_id ORDER BY ts)) AS gap_ms
            FROM gpu_samples WHERE sample_n IS NOT NULL)
      WHERE gap_ms BETWEEN 60000 AND 300000
      GROUP BY gpu_id) AS steps
WHERE gpu_samples.gpu_id = steps.gpu_id AND gpu_samples.sample_n IS NOT NULL;
