-- The inventory of a what-if range: every device seen before its end and not retired by its start.
SELECT gpu_id, cluster, gpu_uuid, model, mig_profile, gpu_fraction, pricing_tier
FROM gpus WHERE (first_seen IS NULL OR first_seen < $end) AND (retired_at IS NULL OR retired_at > $start)
ORDER BY gpu_id
