-- (device, hour) pairs of [$lo, $cutoff) whose samples attribution still reads raw: an allocation
-- starts or ends inside the hour. The SQL form of attribution.partial_hour_keys over
-- allocated_pieces (device-level intervals are job_allocations' own start and end).
SELECT gpu_id, date_trunc('hour', start_time) AS hour FROM job_allocations
WHERE start_time >= $lo AND start_time < $cutoff AND start_time <> date_trunc('hour', start_time)
UNION
SELECT gpu_id, date_trunc('hour', end_time) AS hour FROM job_allocations
WHERE end_time >= $lo AND end_time < $cutoff AND end_time <> date_trunc('hour', end_time)
