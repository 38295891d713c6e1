-- One line per (device, UTC hour, label, holder) of the stored disagreements in the hours of $lo..$hi.
SELECT g.cluster, g.host, g.gpu_uuid, g.mig_instance_id, date_trunc('hour', d.ts) AS hour,
       d.label_job, d.holder_jobs, count(*) AS samples, min(d.ts) AS first_ts, max(d.ts) AS last_ts
FROM attribution_disagreements d JOIN gpus g USING (gpu_id)
WHERE d.ts >= date_trunc('hour', $lo::TIMESTAMP)
  AND d.ts < date_trunc('hour', $hi::TIMESTAMP) + INTERVAL 1 HOUR
GROUP BY ALL
ORDER BY g.cluster, g.host, g.gpu_uuid, g.mig_instance_id, hour, d.label_job;
