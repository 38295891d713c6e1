-- 020: every applied outcome keeps its reason. Before, a refused or skipped action was stored with
-- its outcome word and an empty error: why (another cluster's job, the job it would serve has
-- started, Kueue evicted it first, a PodDisruptionBudget) was printed once on stdout and lost with
-- the CronJob's pod log. `enforce explain`, `enforce preemptions`, the enforcement page and the
-- exporter read it from here.
ALTER TABLE enforcement_audit ADD COLUMN detail VARCHAR;  -- applied rows: the backend's / rail's why
ALTER TABLE enforcement_audit ADD COLUMN cause VARCHAR;   -- a short stable name for that why (other-cluster, rail, changed …)
