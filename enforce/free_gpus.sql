WITH installed AS (
    SELECT cluster, model, sum(gpu_fraction) AS capacity FROM gpus
    WHERE (first_seen IS NULL OR first_seen <= $now) AND (retired_at IS NULL OR retired_at > $now)
    GROUP BY ALL),
held AS (
    SELECT g.cluster, g.model, sum(a.gpu_fraction * g.gpu_fraction) AS held
    FROM job_allocations a JOIN gpus g USING (gpu_id)
    WHERE a.start_time <= $now AND (a.end_time IS NULL OR a.end_time > $now)
    GROUP BY ALL)
SELECT i.cluster, i.model, greatest(i.capacity - coalesce(h.held, 0), 0)
FROM installed i LEFT JOIN held h USING (cluster, model)
