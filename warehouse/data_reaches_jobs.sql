-- Whether a job event (submit, start, end) lies in [$t, $wall]: "now" for the data (data_now.sql)
-- is then at or after $t. Each time bounded alone, so that its zone maps skip the older row
-- groups, and, when no job is that new, the table's statistics answer without reading one.
SELECT EXISTS (SELECT 1 FROM jobs WHERE submit_time >= $t AND submit_time <= $wall)
    OR EXISTS (SELECT 1 FROM jobs WHERE start_time >= $t AND start_time <= $wall)
    OR EXISTS (SELECT 1 FROM jobs WHERE end_time >= $t AND end_time <= $wall)
