"""Bringing real sources into the warehouse: DCGM scrapes, Prometheus, Kubernetes, Slurm, NVML."""
