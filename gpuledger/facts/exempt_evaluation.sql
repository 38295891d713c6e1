-- How many exempt findings evaluation $at stored; no row: it stored none (recorded before 018).
SELECT findings FROM squatting_exempt_evaluations WHERE evaluated_at = $at
