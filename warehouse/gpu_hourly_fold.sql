-- The fold of gpu_hourly_batch.sql's hours marked `fold`: sums and counts add, the first energy
-- value stays the stored one (the new rows are later), the last is the batch's. Run before the
-- new rows are inserted (the batch reads the rows stored before them). Returns the rows updated.
UPDATE gpu_hourly h SET
    s_n = h.s_n + a.s_n,
    s_sm_active = h.s_sm_active + a.s_sm_active,
    s_gr_engine_active = h.s_gr_engine_active + a.s_gr_engine_active,
    s_gpu_util = h.s_gpu_util + a.s_gpu_util,
    s_n_sm_active = h.s_n_sm_active + a.s_n_sm_active,
    s_n_gr_engine_active = h.s_n_gr_engine_active + a.s_n_gr_engine_active,
    s_n_gpu_util = h.s_n_gpu_util + a.s_n_gpu_util,
    e_first = coalesce(h.e_first, a.e_first),
    e_last = coalesce(a.e_last, h.e_last),
    -- as gpu_hourly_select.sql writes an hour without drops (NULL without energy)
    e_inside = coalesce(a.e_last, h.e_last) - coalesce(h.e_first, a.e_first) + 0.0
FROM ({gpu_hourly_batch}) a  -- rollups.py puts gpu_hourly_batch.sql here
WHERE a.fold AND h.gpu_id = a.gpu_id AND h.hour = a.hour AND h.hour >= $lo AND h.hour < $hi
