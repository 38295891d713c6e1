-- The stored statement view of $period when it is as new as the data: built at the data's "now"
-- $now from the inputs as they are ($mark: statement_view_inputs.sql). No row: build the statement.
SELECT scope, state_json, billed_through, reconciliation_json, notes_json, usage_json, lines_arrow
FROM statement_views WHERE period = $period AND data_now = $now AND inputs_mark = $mark
