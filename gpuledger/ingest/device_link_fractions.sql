UPDATE job_allocations a SET gpu_fraction = least(1.0, f.gpus / f.compute)
FROM (SELECT a.cluster, a.job_id, any_value(j.gpus) AS gpus,
             sum(g.gpu_fraction) AS compute
      FROM job_allocations a JOIN gpus g USING (gpu_id)
      JOIN jobs j ON j.cluster = a.cluster AND j.job_id = a.job_id
      WHERE a.source = 'labels'
        AND (a.cluster, a.job_id) IN (SELECT cluster, job_id FROM _device_links)
      GROUP BY a.cluster, a.job_id) f
WHERE a.source = 'labels' AND a.cluster = f.cluster AND a.job_id = f.job_id
