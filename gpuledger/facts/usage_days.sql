-- Per UTC day of [$start, $end): whether the hourly usage table holds it, and when it was
-- materialized (the oldest row). The identifier is one of facts.USAGE_TABLES.
SELECT day, min(materialized_at) FROM "{{ table }}" WHERE day >= $first AND day < $stop GROUP BY day
