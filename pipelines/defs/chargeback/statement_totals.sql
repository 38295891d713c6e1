-- Σ amount per statement month and currency of the billed lines (charges, idle and their
-- corrections), the memo amounts beyond capacity × price (over-allocated, and the charges of
-- clusters of unknown capacity: analytics/chargeback.py), and the idle lines that came out negative.
-- Unpriced lines carry GPU-hours and no currency: not money. {{ billed }}: gpuledger.rules.billing.
SELECT period, min(period_start) AS period_start, min(period_end) AS period_end, currency,
       coalesce(sum(amount) FILTER (WHERE {{ billed }}), 0) AS amount,
       count(*) FILTER (WHERE line_kind = 'idle' AND (gpu_hours < -1e-9 OR amount < 0)) AS negative_idle_lines,
       coalesce(sum(amount) FILTER (WHERE coalesce(correction_of, line_kind)
                                    IN ('over-allocated', 'capacity-unknown')), 0) AS beyond_capacity
FROM chargeback_statements
WHERE currency IS NOT NULL
GROUP BY period, currency
ORDER BY period, currency
