-- The squatting pipeline's latest evaluation at or before $now (evaluations never go back in time).
SELECT max(evaluated_at) FROM squatting_evaluations WHERE evaluated_at <= $now
