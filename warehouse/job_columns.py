"""The ``jobs`` table's columns as polars types (migrations 001, 003, 007, 008): one home for the
frame schema every job source builds and every reader of job rows expects."""

from __future__ import annotations

import polars as pl

# What every job source fills (the columns of migration 001).
JOB_CORE: dict[str, pl.DataType] = {
    "cluster": pl.String, "job_id": pl.String, "project": pl.String, "user_name": pl.String,
    "name": pl.String, "kind": pl.String, "gpu_model": pl.String, "gpus": pl.Float64,
    "min_runtime_s": pl.Int64, "submit_time": pl.Datetime("us"), "start_time": pl.Datetime("us"),
    "end_time": pl.Datetime("us"), "state": pl.String, "priority": pl.Int64,
    "namespace": pl.String, "source": pl.String, "updated_at": pl.Datetime("us"),
}
# Every column of the table: the core plus the scheduler fields only some sources know.
JOB_TYPES: dict[str, pl.DataType] = {
    **JOB_CORE,
    "qos": pl.String, "partition": pl.String, "time_limit_s": pl.Int64,  # Slurm (003)
    "priority_class": pl.String,  # Kubernetes / Kueue (003)
    "pricing_tier": pl.String,  # a tier the scheduler names, e.g. by Slurm partition (007)
    "scheduler_job": pl.String,  # the scheduler's own name: namespace/pod, the Slurm JobID (008)
    "gpu_memory_mib": pl.Float64,  # GPU memory a shared (HAMi) job asked for, beside its GPU share (025)
}


def job_schema(*columns: str) -> dict[str, pl.DataType]:
    """The types of ``columns`` of ``jobs``, in that order (KeyError names a column it lacks)."""
    return {c: JOB_TYPES[c] for c in columns}
