-- The stored statement view of $period ([$start, $end)) when it is as new as the data: built at the
-- data's "now" $now, or at any "now" past the month's end when $now is too (a past month's statement
-- is the whole month either way), from the inputs as they are ($mark: statement_view_inputs.sql).
-- No row: build the statement.
SELECT scope, state_json, billed_through, reconciliation_json, notes_json, usage_json, lines_arrow
FROM statement_views
WHERE period = $period AND least(data_now, $end) = least($now::TIMESTAMP, $end) AND inputs_mark = $mark
