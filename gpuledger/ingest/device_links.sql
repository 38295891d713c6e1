CREATE OR REPLACE TEMP TABLE _device_links AS
WITH labelled AS (
    SELECT s.gpu_id, s.ts,
           CASE WHEN s.pod IS NOT NULL THEN coalesce(s.namespace, '') || '/' || s.pod ELSE s.hpc_job END
               AS scheduler_job
    FROM gpu_samples s
    WHERE s.ts >= $lo AND s.ts < $hi AND (s.pod IS NOT NULL OR s.hpc_job IS NOT NULL)
    UNION ALL  -- every pod of a shared device (dcgm-exporter's virtual-GPU mode), not only the
               -- one whose labels the device's own sample kept
    SELECT p.gpu_id, p.ts, p.namespace || '/' || p.pod FROM pod_gpu_samples p WHERE p.ts >= $lo AND p.ts < $hi
),
observed AS (  -- a label names a run by the scheduler's name and the sample's time: a recreated
               -- pod or a requeued Slurm job repeats the name, each run owns only its own samples
    SELECT g.cluster, j.job_id, l.gpu_id, min(l.ts) AS first_ts
    FROM labelled l JOIN gpus g USING (gpu_id)
    JOIN jobs j ON j.cluster = g.cluster AND coalesce(j.scheduler_job, j.job_id) = l.scheduler_job
         AND l.ts >= coalesce(j.start_time, j.submit_time, l.ts) AND (j.end_time IS NULL OR l.ts <= j.end_time)
    GROUP BY ALL
),
scheduled AS (  -- jobs whose devices their scheduler already told us: not ours to derive
    SELECT DISTINCT cluster, job_id FROM job_allocations WHERE source IS DISTINCT FROM 'labels'
)
SELECT o.cluster, o.job_id, o.gpu_id,
       greatest(least(o.first_ts, coalesce(a.start_time, o.first_ts)),
                coalesce(j.start_time, o.first_ts)) AS start_time,
       j.end_time,
       j.gpus
FROM observed o
JOIN jobs j ON j.cluster = o.cluster AND j.job_id = o.job_id
ANTI JOIN scheduled x ON x.cluster = o.cluster AND x.job_id = o.job_id
LEFT JOIN (SELECT cluster, job_id, gpu_id, min(start_time) AS start_time FROM job_allocations
           WHERE source = 'labels' GROUP BY ALL) a
       ON a.cluster = o.cluster AND a.job_id = o.job_id AND a.gpu_id = o.gpu_id
