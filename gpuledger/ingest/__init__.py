"""Bringing real sources into the warehouse. ``metrics/``: what devices did (DCGM scrape,
Prometheus, NVML). ``jobs/``: who held them (Kubernetes, Slurm, job CSV). ``device_links``
joins the two."""

DEFAULT_CLUSTER = "default"  # cluster name of real sources when none is given
# Set where `gpuledger ingest scrape --every` runs beside Dagster (make dev, the Kubernetes
# StatefulSet, the systemd units): Dagster's ingest job then leaves sources.scrape to that service,
# so each exporter has one scraper. Any value but "" / "0" counts.
SCRAPE_SERVICE_ENV = "GPULEDGER_SCRAPE_SERVICE"
