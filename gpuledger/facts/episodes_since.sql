-- Every squatting episode first seen at or before $at, with its lifecycle (the digests' input).
SELECT * FROM squatting_findings WHERE first_seen <= $at
