-- Whole GPUs (not MIG instances) installed at $now with nothing allocated on them, per (cluster, model):
-- the only idle GPUs a job of whole GPUs can start on (free_gpus.sql also counts idle halves).
WITH held AS (
    SELECT DISTINCT gpu_id FROM job_allocations
    WHERE start_time <= $now AND (end_time IS NULL OR end_time > $now) AND gpu_fraction > 0)
SELECT g.cluster, g.model, count(*)
FROM gpus g ANTI JOIN held h USING (gpu_id)
WHERE g.mig_instance_id = -1 AND g.gpu_fraction >= 1
  AND (g.first_seen IS NULL OR g.first_seen <= $now) AND (g.retired_at IS NULL OR g.retired_at > $now)
GROUP BY ALL
