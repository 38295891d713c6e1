-- warehouse_summary's counts: devices (physical, MIG instances), jobs, samples and their span,
-- quarantined rows.
SELECT (SELECT count(DISTINCT (cluster, gpu_uuid)) FROM gpus),
       (SELECT count(*) FROM gpus WHERE mig_instance_id <> -1),
       (SELECT count(*) FROM jobs),
       (SELECT count(*) FROM gpu_samples),
       (SELECT min(ts) FROM gpu_samples), (SELECT max(ts) FROM gpu_samples),
       (SELECT count(*) FROM quarantine)
