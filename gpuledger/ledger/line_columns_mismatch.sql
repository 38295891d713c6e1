-- The first line of a statement revision whose columns beside its JSON (what SQL readers and
-- `period list` read) say something other than the checksummed line: amount, currency or kind.
SELECT line_no, level,
       CASE WHEN amount IS DISTINCT FROM TRY_CAST(json_extract_string(line_json, '$.amount') AS DECIMAL(38, 2))
            THEN 'amount'
            WHEN currency IS DISTINCT FROM json_extract_string(line_json, '$.currency') THEN 'currency'
            ELSE 'line_kind' END
FROM statement_lines
WHERE period = $period AND revision = $revision
  AND (amount IS DISTINCT FROM TRY_CAST(json_extract_string(line_json, '$.amount') AS DECIMAL(38, 2))
       OR currency IS DISTINCT FROM json_extract_string(line_json, '$.currency')
       OR line_kind IS DISTINCT FROM json_extract_string(line_json, '$.line_kind'))
ORDER BY level, line_no
LIMIT 1
