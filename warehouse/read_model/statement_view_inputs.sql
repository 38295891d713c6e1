-- What a month's statement is built from, as one string that moves whenever any of it does:
-- the ledger (config loads, closes, corrections: rows only ever appended, counted), the inventory,
-- the org tree and the rate card, every job and allocation (a late sacct import or an end time
-- filled in changes the lines without moving the data's "now"), the month's hourly activity
-- (late samples refresh their hour) and the raw samples of the partial hour before $now.
-- count + bit_xor of the rows' hashes: order-free, and any changed row changes it.
SELECT concat_ws('/',
    (SELECT count(*) FROM config_versions), (SELECT count(*) FROM statement_revisions),
    (SELECT count(*) FROM ledger_audit),
    (SELECT count(*) || ':' || coalesce(bit_xor(hash(t)), 0) FROM statement_lines t),
    (SELECT count(*) || ':' || coalesce(bit_xor(hash(t)), 0) FROM gpus t),
    (SELECT count(*) || ':' || coalesce(bit_xor(hash(t)), 0) FROM org_nodes t),
    (SELECT count(*) || ':' || coalesce(bit_xor(hash(t)), 0) FROM rate_card t),
    (SELECT count(*) || ':' || coalesce(bit_xor(hash(t)), 0) FROM jobs t),
    (SELECT count(*) || ':' || coalesce(bit_xor(hash(t)), 0) FROM job_allocations t),
    (SELECT count(*) || ':' || coalesce(bit_xor(hash(t)), 0) FROM gpu_hourly t
     WHERE hour >= $start AND hour < $end),
    (SELECT count(*) || ':' || coalesce(bit_xor(hash(gpu_id, ts)), 0) FROM gpu_samples
     WHERE ts >= greatest($start, date_trunc('hour', $now::TIMESTAMP)) AND ts < $end AND ts <= $now))
