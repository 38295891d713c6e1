"""Device-metric sources: DCGM exporter scrapes, Prometheus backfill, NVML on a node; the DCGM
field catalog, the shared value checks and the sample writer they all use."""
