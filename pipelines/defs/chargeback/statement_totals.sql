-- Σ amount per statement month and currency (charges, idle and corrections together), and the
-- idle lines that came out negative (job records claiming more GPUs than the inventory holds).
SELECT period, min(period_start) AS period_start, min(period_end) AS period_end, currency,
       sum(amount) AS amount,
       count(*) FILTER (WHERE line_kind = 'idle' AND (gpu_hours < -1e-9 OR amount < 0)) AS negative_idle_lines
FROM chargeback_statements
GROUP BY period, currency
ORDER BY period, currency
