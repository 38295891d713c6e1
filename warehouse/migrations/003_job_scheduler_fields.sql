-- 003: what the scheduler says about a job beyond its GPUs: QOS, partition, time limit,
-- Kubernetes priority class.
ALTER TABLE jobs ADD COLUMN qos VARCHAR;
ALTER TABLE jobs ADD COLUMN partition VARCHAR;
ALTER TABLE jobs ADD COLUMN time_limit_s BIGINT;
ALTER TABLE jobs ADD COLUMN priority_class VARCHAR;
