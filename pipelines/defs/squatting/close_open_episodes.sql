-- The open episodes are re-written whole by each evaluation (continued, resolved or kept).
DELETE FROM squatting_findings WHERE resolved_at IS NULL
