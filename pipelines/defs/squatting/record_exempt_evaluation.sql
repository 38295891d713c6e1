-- This evaluation's exempt findings are stored (squatting_exempt_findings), even when there are none.
INSERT INTO squatting_exempt_evaluations (evaluated_at, findings) VALUES ($evaluated_at, $findings)
