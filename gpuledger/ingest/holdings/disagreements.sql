-- Samples in [$lo, $hi) (of $cluster's devices; NULL: every cluster) whose pod / hpc_job labels name someone the scheduler side contradicts:
-- a scheduler-side holder (job_allocations from device holdings) covers the device then and is
-- another job, or the labelled job has scheduler-side allocations but none on this device then.
-- Such samples are attributed by the scheduler side; this lists each one.
WITH labelled AS (
    SELECT s.gpu_id, s.ts,
           CASE WHEN s.pod IS NOT NULL THEN coalesce(s.namespace, '') || '/' || s.pod ELSE s.hpc_job END
               AS label_job
    FROM gpu_samples s
    WHERE s.ts >= $lo AND s.ts < $hi AND (s.pod IS NOT NULL OR s.hpc_job IS NOT NULL)
      AND ($cluster IS NULL OR s.gpu_id IN (SELECT gpu_id FROM gpus WHERE cluster = $cluster))
),
held AS (
    SELECT a.gpu_id, a.start_time, a.end_time, a.cluster, a.job_id,
           coalesce(j.scheduler_job, j.job_id) AS holder_job
    FROM job_allocations a JOIN jobs j USING (cluster, job_id)
    WHERE a.source IN ('slurm-prolog', 'slurm-scontrol', 'pod-resources')
      AND a.start_time < $hi AND (a.end_time IS NULL OR a.end_time > $lo)
),
holders AS (  -- every scheduler-side holder of each labelled sample's device at its time
    SELECT l.gpu_id, l.ts, l.label_job,
           string_agg(DISTINCT h.holder_job, ',' ORDER BY h.holder_job) AS holder_jobs,
           bool_or(h.holder_job = l.label_job) AS label_holds
    FROM labelled l LEFT JOIN held h
         ON h.gpu_id = l.gpu_id AND l.ts >= h.start_time AND (h.end_time IS NULL OR l.ts < h.end_time)
    GROUP BY ALL
),
scheduled_names AS (SELECT DISTINCT g.cluster, h.holder_job FROM held h JOIN gpus g USING (gpu_id))
SELECT x.gpu_id, x.ts, x.label_job, coalesce(x.holder_jobs, '(nobody)') AS holder_jobs
FROM holders x JOIN gpus g USING (gpu_id)
WHERE (x.holder_jobs IS NOT NULL AND NOT coalesce(x.label_holds, false))
   OR (x.holder_jobs IS NULL
       AND (g.cluster, x.label_job) IN (SELECT cluster, holder_job FROM scheduled_names));
