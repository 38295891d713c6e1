-- What the statement of the month [$start, $end) at the data's "now" $now is built from, as one
-- string that moves whenever any of it does: the ledger (config loads, closes, corrections: rows
-- only ever appended, counted), the frozen lines, the inventory as the month saw it (last_seen past
-- the month's end is cut there, or every scrape would move it), the org tree and the rate card, the
-- jobs and allocations the month loads (a late sacct import or an end time filled in changes the
-- lines without moving "now"), the month's hourly activity (late samples refresh their hour) and
-- the raw samples of the partial hour before $now inside the month.
-- count + bit_xor of the rows' hashes: order-free, and any changed row changes it. A past month's
-- mark stays put while later months' data arrives, so its stored view stays readable all month.
SELECT concat_ws('/',
    (SELECT count(*) FROM config_versions), (SELECT count(*) FROM statement_revisions),
    (SELECT count(*) FROM ledger_audit),
    (SELECT count(*) || ':' || coalesce(bit_xor(hash(t)), 0) FROM statement_lines t),
    (SELECT count(*) || ':' || coalesce(bit_xor(hash(t)), 0)
     FROM (SELECT * EXCLUDE (last_seen), least(last_seen, $end) AS last_seen FROM gpus) t),
    (SELECT count(*) || ':' || coalesce(bit_xor(hash(t)), 0) FROM org_nodes t),
    (SELECT count(*) || ':' || coalesce(bit_xor(hash(t)), 0) FROM rate_card t),
    -- the jobs and allocations analytics.load.load_tables reads for the month
    (SELECT count(*) || ':' || coalesce(bit_xor(hash(t)), 0) FROM jobs t
     WHERE coalesce(submit_time, start_time) < $end AND (end_time IS NULL OR end_time > $start)),
    (SELECT count(*) || ':' || coalesce(bit_xor(hash(a)), 0) FROM job_allocations a
     WHERE (a.start_time < $end AND (a.end_time IS NULL OR a.end_time > $start))
        OR EXISTS (SELECT 1 FROM jobs j WHERE j.cluster = a.cluster AND j.job_id = a.job_id
                   AND coalesce(j.submit_time, j.start_time) < $end AND (j.end_time IS NULL OR j.end_time > $start))),
    (SELECT count(*) || ':' || coalesce(bit_xor(hash(t)), 0) FROM gpu_hourly t
     WHERE hour >= $start AND hour < $end),
    (SELECT count(*) || ':' || coalesce(bit_xor(hash(gpu_id, ts)), 0) FROM gpu_samples
     WHERE ts >= greatest($start, date_trunc('hour', $now::TIMESTAMP)) AND ts < $end AND ts <= $now))
