-- 005: where an allocation row came from: the scheduler or simulator that placed the job, or
-- `labels` when it was derived from the pod / hpc_job labels DCGM puts on a device's samples
-- (gpuledger.ingest.device_links). Derived rows are the only ones gpuledger rewrites.
ALTER TABLE job_allocations ADD COLUMN source VARCHAR;
