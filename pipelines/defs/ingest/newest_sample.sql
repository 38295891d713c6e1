-- The newest sample a source has written (naive UTC), NULL when it has written none.
SELECT max(ts) AS newest FROM gpu_samples WHERE source = $source
