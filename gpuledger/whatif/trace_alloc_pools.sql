-- How many devices of each (model, MIG profile) each job of the range held.
SELECT a.cluster, a.job_id, g.model, g.mig_profile, count(DISTINCT a.gpu_id) AS devices
FROM job_allocations a JOIN gpus g USING (gpu_id) JOIN jobs j ON j.cluster = a.cluster AND j.job_id = a.job_id
WHERE coalesce(j.submit_time, j.start_time) < $end AND (j.end_time IS NULL OR j.end_time > $start)
GROUP BY ALL
