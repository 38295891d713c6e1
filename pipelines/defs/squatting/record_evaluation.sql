INSERT INTO squatting_evaluations (evaluated_at, findings, recorded_at) VALUES ($evaluated_at, $findings, $recorded_at)
