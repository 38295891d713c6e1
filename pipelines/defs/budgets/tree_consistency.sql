-- Budget snapshots that disagree with the org tree, per snapshot day and budget period:
--   consumed_below_children: a node consumed less than its children together (a subtree's
--     consumption includes every child's);
--   remaining_mismatch: remaining ≠ budget − consumed;
--   over_promised: a node's own budget is smaller than its children's own budgets together.
WITH snap AS (
    SELECT s.*, o.parent FROM budget_snapshots s LEFT JOIN org_nodes o ON o.node = s.node
),
children AS (
    SELECT day, parent AS node, period_start, period_end,
           sum(consumed_gpu_hours) AS children_consumed,
           sum(budget_gpu_hours) FILTER (WHERE budget_own) AS children_budget
    FROM snap WHERE parent IS NOT NULL
    GROUP BY day, parent, period_start, period_end
)
SELECT
    count(*) FILTER (WHERE p.consumed_gpu_hours + 1e-6 < c.children_consumed) AS consumed_below_children,
    (SELECT count(*) FROM budget_snapshots
      WHERE abs(remaining_gpu_hours - (budget_gpu_hours - consumed_gpu_hours)) > 1e-6) AS remaining_mismatch,
    count(*) FILTER (WHERE p.budget_own AND c.children_budget > p.budget_gpu_hours + 1e-6) AS over_promised
FROM snap p
JOIN children c USING (day, node, period_start, period_end)
