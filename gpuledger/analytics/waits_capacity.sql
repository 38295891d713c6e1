-- GPUs installed per cluster and model at $now, in whole-GPU equivalents: a MIG instance by its
-- compute share, a physical GPU split into instances counted through them (never twice); retired
-- devices left out.
SELECT cluster, model AS gpu_model, sum(gpu_fraction) AS gpus
FROM gpus g
WHERE (retired_at IS NULL OR retired_at > $now)
  AND NOT (mig_instance_id = -1 AND EXISTS (
      SELECT 1 FROM gpus m WHERE m.cluster = g.cluster AND m.gpu_uuid = g.gpu_uuid AND m.mig_instance_id <> -1))
GROUP BY cluster, model
