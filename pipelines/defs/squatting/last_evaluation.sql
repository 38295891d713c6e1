-- The latest time squatting was evaluated at (NULL before the first evaluation).
SELECT max(evaluated_at) FROM squatting_evaluations
