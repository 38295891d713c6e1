-- What people know a job by, for the jobs an alert is about ($keys: 'cluster/job_id'): its name,
-- the scheduler's own id, namespace and source, and the GPU models and hosts it holds or held.
SELECT j.cluster, j.job_id, j.name, j.scheduler_job, j.namespace, j.source, j.user_name, j.gpu_model,
       string_agg(DISTINCT g.model, ', ' ORDER BY g.model) AS models,
       string_agg(DISTINCT g.host, ', ' ORDER BY g.host) AS hosts
FROM jobs j
LEFT JOIN job_allocations a ON a.cluster = j.cluster AND a.job_id = j.job_id
LEFT JOIN gpus g ON g.gpu_id = a.gpu_id
WHERE list_contains($keys::VARCHAR[], j.cluster || '/' || j.job_id)
GROUP BY ALL
