-- The jobs rows an earlier chunk of this job CSV import stored (source jobs-csv, stamped with the
-- import's now) for the (cluster, job_id) keys of the chunk at hand (_csv_chunk_keys).
SELECT j.*
FROM jobs j
JOIN _csv_chunk_keys k USING (cluster, job_id)
WHERE j.source = $source AND j.updated_at = $now
