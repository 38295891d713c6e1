-- What the warehouse holds for the dashboards: row counts of the materialized tables, the span of
-- the hourly analytics, and the periods with statements.
SELECT (SELECT count(*) FROM utilization_hourly) AS utilization_rows,
       (SELECT count(*) FROM fairshare_snapshots) AS fairshare_rows,
       (SELECT count(*) FROM budget_snapshots) AS budget_rows,
       (SELECT count(*) FROM chargeback_statements) AS statement_rows,
       (SELECT count(*) FROM gpu_samples) AS samples,
       (SELECT count(*) FROM jobs) AS jobs,
       (SELECT min(hour) FROM utilization_hourly) AS first_hour,
       (SELECT max(hour) FROM utilization_hourly) AS last_hour,
       (SELECT max(as_of) FROM fairshare_snapshots) AS last_snapshot,
       (SELECT max(evaluated_at) FROM squatting_evaluations) AS last_squatting_evaluation
