-- A snapshot table's rows as of $as_of: how many, the oldest materialization among them, and how
-- many lack {{ filled }} (a column the report never leaves NULL; rows from before its migration do).
-- (The identifiers are facts.SNAPSHOT_TABLES / their columns, substituted before binding.)
SELECT count(*), min(materialized_at), count(*) FILTER (WHERE "{{ filled }}" IS NULL)
FROM "{{ table }}" WHERE as_of = $as_of
