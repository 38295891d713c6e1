-- The per-(gpu_id, hour) aggregates of gpu_hourly, over the rows in scope: ratios clipped to 0..1,
-- first / last energy by ts, the minimum (a reset can only hide in an hour whose minimum is below
-- its first value). One home for the rule: rollups.py puts it into gpu_hourly_select.sql (an hour
-- aggregated from gpu_samples) and gpu_hourly_batch.sql (a batch's new rows, folded into the hour).
-- A row counts as the raw samples it stands for (sample_n; NULL = one: migration 015).
coalesce(sum(coalesce(sample_n, 1)), 0)::BIGINT AS s_n,
coalesce(sum(least(greatest(sm_active_ratio, 0.0), 1.0) * coalesce(sample_n, 1)), 0.0) AS s_sm_active,
coalesce(sum(least(greatest(gr_engine_active_ratio, 0.0), 1.0) * coalesce(sample_n, 1)), 0.0) AS s_gr_engine_active,
coalesce(sum(least(greatest(gpu_util_ratio, 0.0), 1.0) * coalesce(sample_n, 1)), 0.0) AS s_gpu_util,
coalesce(sum(coalesce(sample_n, 1)) FILTER (WHERE sm_active_ratio IS NOT NULL), 0)::BIGINT AS s_n_sm_active,
coalesce(sum(coalesce(sample_n, 1)) FILTER (WHERE gr_engine_active_ratio IS NOT NULL), 0)::BIGINT AS s_n_gr_engine_active,
coalesce(sum(coalesce(sample_n, 1)) FILTER (WHERE gpu_util_ratio IS NOT NULL), 0)::BIGINT AS s_n_gpu_util,
arg_min(energy_total_j, ts) FILTER (WHERE energy_total_j IS NOT NULL) AS e_first,
arg_max(energy_total_j, ts) FILTER (WHERE energy_total_j IS NOT NULL) AS e_last,
min(energy_total_j) AS e_min
