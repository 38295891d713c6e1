-- A snapshot table's rows as of $as_of: how many, and the oldest materialization among them.
-- (The identifier is one of read_model.SNAPSHOT_TABLES, substituted before binding.)
SELECT count(*), min(materialized_at) FROM "{table}" WHERE as_of = $as_of
