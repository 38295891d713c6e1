-- 016: budget_report gained, after migration 009, the allocated GPU-hours the rate card could not
-- weigh (counted at 1.0) and their models. The snapshots store them too, so
-- `report budget` is served from materialized rows (gpuledger.warehouse.read_model.facts.budget:
-- a snapshot lacking a report column is never used). Rows materialized before this migration have
-- NULL here and no column is back-filled: they are rematerialized by the next daily run.
ALTER TABLE budget_snapshots ADD COLUMN unweighted_gpu_hours DOUBLE;   -- allocated GPU-hours counted at weight 1.0
ALTER TABLE budget_snapshots ADD COLUMN unweighted_models VARCHAR;     -- their models, comma-separated; NULL: none
