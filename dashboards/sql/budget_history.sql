-- Every daily budget snapshot of one node's budget period (the burn-down).
SELECT day, as_of, node, period_start, period_end, budget_gpu_hours, consumed_gpu_hours,
       remaining_gpu_hours, burn_gpu_hours_per_day, projected_exhaustion, status
FROM budget_snapshots
WHERE node = $node AND period_start = $period_start AND as_of <= $end
ORDER BY as_of
