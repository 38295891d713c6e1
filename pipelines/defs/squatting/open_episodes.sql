-- Squatting episodes still open (not resolved), one per job.
SELECT * FROM squatting_findings WHERE resolved_at IS NULL ORDER BY cluster, job_id
