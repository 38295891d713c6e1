-- Blocks per table: a block shared by several tables' segments counts as a share to each, plus
-- each segment's additional blocks. {{ segments }}: one SELECT per table of
-- pragma_storage_info(table) (table, block_id, additional_block_ids), UNION ALL'd; the names come
-- from the catalog, never from input.
WITH seg AS ({{ segments }}),
per_block AS (SELECT block_id, count(*) AS segs FROM seg WHERE block_id >= 0 GROUP BY block_id)
SELECT s.t, sum(1.0 / p.segs) + sum(len(s.additional_block_ids)) AS blocks
FROM seg s JOIN per_block p USING (block_id) GROUP BY s.t
