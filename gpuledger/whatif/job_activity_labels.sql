-- Jobs without device allocations: per hour of runtime, the mean of their samples found by the
-- label DCGM puts on them (the fragment match: a Slurm job's hpc_job, a pod's namespace/pod, as
-- gpuledger.ingest.device_links matches them), each sample's best signal (the fragment activity_ratio,
-- gpuledger.rules.activity, so GPU utilisation is no reading on a MIG instance).
SELECT j.cluster, j.job_id,
       CAST(floor(epoch(date_trunc('hour', s.ts) - date_trunc('hour', j.start_time)) / 3600) AS BIGINT) AS run_hour,
       avg({{ activity_ratio }}) AS activity
FROM gpu_samples s
JOIN gpus g ON g.gpu_id = s.gpu_id
JOIN jobs j ON {{ match }}
WHERE s.ts >= $start AND s.ts < $end AND j.start_time IS NOT NULL AND s.ts >= j.start_time
  AND (j.end_time IS NULL OR s.ts < j.end_time)
GROUP BY ALL
