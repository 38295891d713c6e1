-- Delivery ratio and usage per project per daily snapshot over the period.
SELECT day, as_of, node, delivery_ratio, occupancy_ratio, gpu_hours_window, level_fs, fs_rank
FROM fairshare_snapshots
WHERE kind = 'project' AND as_of >= $start AND as_of <= $end
ORDER BY day, node
