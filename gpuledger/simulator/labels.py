"""Kubernetes / Slurm labels the exporter attaches to a device running a job."""

from __future__ import annotations

import polars as pl

from gpuledger.simulator.noise import SALT, hash64


def job_labels(sim) -> pl.DataFrame:
    """One row per job index: namespace, pod, container (Kubernetes jobs) or hpc_job (Slurm)."""
    jobs = sim.workload.jobs
    n = jobs.height
    suffix = [f"{int(h) & 0xFFFFF:05x}" for h in hash64(sim.seed, SALT["job"], range(n)) ] if n else []
    k8s = jobs["scheduler"] == "k8s"
    return pl.DataFrame({
        "job": pl.Series(range(n), dtype=pl.Int64),
        "namespace": jobs["namespace"],
        "pod": pl.Series([f"{name}-{sfx}" for name, sfx in zip(jobs["name"], suffix, strict=True)])
               .zip_with(k8s, pl.Series([None] * n, dtype=pl.String)) if n else pl.Series([], dtype=pl.String),
        "container": pl.Series(["main"] * n).zip_with(k8s, pl.Series([None] * n, dtype=pl.String))
                     if n else pl.Series([], dtype=pl.String),
        "hpc_job": jobs["job_id"].zip_with(~k8s, pl.Series([None] * n, dtype=pl.String))
                   if n else pl.Series([], dtype=pl.String),
    })
