-- 006: capacity is what existed (issue 8, item 4). A device counts as capacity from first_seen
-- until it is retired: at retired_at when the inventory says so (decommissioned, moved to
-- another cluster), otherwise last_seen plus the chargeback policy's grace. NULL = no explicit
-- entry.
ALTER TABLE gpus ADD COLUMN retired_at TIMESTAMP;
