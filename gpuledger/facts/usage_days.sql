-- Per UTC day of [$first, $stop) that the hourly table holds: when it was materialized (the oldest
-- row), the data's now its rows were computed up to (the oldest; migration 029) and whether any row
-- lacks that stamp (materialized before 029). The identifier is one of facts.USAGE_TABLES or
-- utilization_hourly.
SELECT day, min(materialized_at), min(covered_until), bool_or(covered_until IS NULL)
FROM "{{ table }}" WHERE day >= $first AND day < $stop GROUP BY day
