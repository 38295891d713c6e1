-- Whether a sample's coverage end, not after $wall, lies at or after $t (sample_coverage_end.sql):
-- "now" for the data is then at or after $t. Only rows from $rows_lo = $t - 300 s can reach $t
-- (covered_ms is under 300 s); the bound as a value lets the scan skip every older row group and,
-- when no row is that new, the table's statistics answer without reading one.
SELECT EXISTS (
    SELECT 1 FROM gpu_samples
    WHERE ts >= $rows_lo AND ts <= $wall
      AND least(ts + to_milliseconds(coalesce(covered_ms, 0)), $wall) >= $t
)
