-- "Now" for the data: the newest sample or job event (submit, start, end) not after $wall.
SELECT greatest((SELECT max(ts) FROM gpu_samples WHERE ts <= $wall),
                (SELECT max(t) FROM (SELECT unnest([submit_time, start_time, end_time]) AS t FROM jobs)
                 WHERE t <= $wall))
