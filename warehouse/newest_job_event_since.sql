-- The newest job event (submit, start, end) in [$t, $wall], NULL without one ("now" for the data,
-- data_now.sql, counts them). Each time bounded alone, so that its zone maps skip the older row
-- groups and, when no job is that new, the table's statistics answer without reading one.
SELECT greatest(
    (SELECT max(submit_time) FROM jobs WHERE submit_time >= $t AND submit_time <= $wall),
    (SELECT max(start_time) FROM jobs WHERE start_time >= $t AND start_time <= $wall),
    (SELECT max(end_time) FROM jobs WHERE end_time >= $t AND end_time <= $wall))
