-- The stored statement view of $period ([$start, $end)) built at the data's "now" $now, or at any
-- "now" past the month's end when $now is too (a past month's statement is the whole month either
-- way), with the fingerprint of its inputs then (statement_views.fresh compares it with
-- statement_view_inputs.sql now). No row: build the statement.
SELECT inputs_mark, scope, state_json, billed_through, reconciliation_json, notes_json, usage_json, lines_arrow
FROM statement_views
WHERE period = $period AND least(data_now, $end) = least($now::TIMESTAMP, $end)
