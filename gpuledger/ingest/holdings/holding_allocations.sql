-- A job the scheduler side speaks for: its allocations written again from the holdings, one row
-- per device and start.
INSERT OR REPLACE INTO job_allocations (cluster, job_id, gpu_id, start_time, end_time, gpu_fraction, source)
SELECT cluster, job_id, gpu_id, min(start_time),
       CASE WHEN bool_or(end_time IS NULL) THEN NULL ELSE max(end_time) END,
       -- replicas of one time-sliced GPU add up (two of four = half the GPU)
       least(1.0, sum(gpu_fraction)), any_value(source)
FROM _holding_links GROUP BY cluster, job_id, gpu_id, start_time
