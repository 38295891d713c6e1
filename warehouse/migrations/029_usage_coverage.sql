-- 029: the data's "now" each hourly usage / utilization day was computed up to (issue 41, answers as
-- the user waits). The running day's partition is replaced on every refresh; its rows answer a range
-- that ends after its last whole hour only while the data's now is still the one they were computed
-- at (gpuledger.facts: then they are the range computation's digits). A closed day's rows answer once
-- computed after the day ended. Rows materialized before this migration have NULL here: they answer
-- whole past days only, as before, until the next daily run replaces them.
ALTER TABLE usage_hourly_jobs ADD COLUMN covered_until TIMESTAMP;      -- the data's now when computed (UTC)
ALTER TABLE usage_hourly_projects ADD COLUMN covered_until TIMESTAMP;
ALTER TABLE utilization_hourly ADD COLUMN covered_until TIMESTAMP;
