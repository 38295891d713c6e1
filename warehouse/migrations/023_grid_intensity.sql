-- 023: the hourly carbon intensity of each site's electricity (issue 39), from the CSV series
-- named by clusters.<name>.grid_intensity.csv, replaced whole by `gpuledger config load` (like the
-- rate card). A site (cluster) with a constant intensity has no rows here; its constant is in the
-- config. kgCO2e = facility kWh × this hour's intensity (gpuledger/analytics/carbon.py).
CREATE TABLE grid_intensity_hours (
    cluster          VARCHAR NOT NULL,   -- the site: the cluster name its samples and jobs carry
    hour             TIMESTAMP NOT NULL, -- UTC, on the hour; the value holds for [hour, hour + 1 h)
    kg_co2e_per_kwh  DOUBLE NOT NULL,    -- kgCO2e per kWh drawn from the grid
    PRIMARY KEY (cluster, hour)
);
