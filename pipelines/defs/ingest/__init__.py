"""Ingest: raw tables from the configured sources (DCGM scrape, Prometheus, Kubernetes, Slurm,
job CSV folder) and the config's reference tables; the every-minute schedule and the CSV sensor."""
