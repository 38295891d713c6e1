"""Bringing real sources into the warehouse. ``metrics/``: what devices did (DCGM scrape,
Prometheus, NVML). ``jobs/``: who held them (Kubernetes, Slurm, job CSV). ``device_links``
joins the two."""

DEFAULT_CLUSTER = "default"  # cluster name of real sources when none is given

