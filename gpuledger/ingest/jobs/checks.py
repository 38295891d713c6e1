"""Checks every job source (CSV, Slurm, Kubernetes) applies before a row reaches ``jobs``.

A row that reads fine can still poison every report: a future end moves "now", a billion GPUs turn a
16-GPU cluster into a billion GPU-hours, a model nobody prices or an account that is not a project
cannot be charged. Such a row is quarantined with the reason (the field, the value, what would fix
it); the rows beside it land. The limits come from the warehouse (org tree, rate card, inventory)
and from ``policy.jobs`` in the config.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

import polars as pl

from gpuledger.config_store import policy_in_force, stored_config_in_force
from gpuledger.errors import printable
from gpuledger.rules.model_keys import KNOWN_MODELS
from gpuledger.warehouse import QuarantineRow

EARLIEST = datetime(2000, 1, 1)  # nothing before it ran on a GPU this ledger prices
JOB_KINDS = frozenset({"training", "fine-tune", "batch", "inference", "interactive"})
DEFAULT_MAX_GPUS_PER_JOB = 4096.0
DEFAULT_CLOCK_SKEW = timedelta(minutes=10)
INT64_MAX = 2**63 - 1  # the warehouse's BIGINT: a value beyond it would sink the whole import


def whole_number(value: int, field_name: str) -> int:
    """``value`` when the warehouse can store it (a signed 64-bit integer), else a ValueError naming
    the field: that row is quarantined, the rows beside it land."""
    if not -INT64_MAX - 1 <= value <= INT64_MAX:
        raise ValueError(f"{field_name}: {value} is beyond the 64-bit range the warehouse stores "
                         f"(|n| < 2^63); fix the row")
    return value


@dataclass(frozen=True)
class JobLimits:
    """What a job row may say. ``None`` leaves a check off (e.g. a warehouse with no org tree yet)."""

    projects: frozenset[str] | None = None      # leaf nodes of the org tree
    models: frozenset[str] | None = None        # known model keys, the rate card's and the inventory's
    kinds: frozenset[str] = JOB_KINDS
    max_gpus_per_job: float = DEFAULT_MAX_GPUS_PER_JOB
    cluster_gpus: Mapping[str, float] = field(default_factory=dict)  # physical GPUs per cluster
    clock_skew: timedelta = DEFAULT_CLOCK_SKEW
    first_days: Mapping[str, datetime] = field(default_factory=dict)  # clusters.<name>.first_day, else EARLIEST


def _policy_limits(con, policy) -> tuple[float, timedelta]:
    jobs = getattr(policy_in_force(con, policy), "jobs", None)  # a stored config that no longer validates says so
    if jobs is None:
        return DEFAULT_MAX_GPUS_PER_JOB, DEFAULT_CLOCK_SKEW
    return jobs.max_gpus_per_job, timedelta(minutes=jobs.clock_skew_minutes)


def job_limits(con, policy=None) -> JobLimits:
    """Limits from the warehouse on ``con``: the org tree's projects, the models the rate card, the
    inventory and gpuledger know, each cluster's physical GPUs; ``policy`` (else the stored
    config's) gives ``jobs.max_gpus_per_job`` and ``jobs.clock_skew_minutes``."""
    nodes = con.execute(
        "SELECT node FROM org_nodes n WHERE NOT EXISTS (SELECT 1 FROM org_nodes c WHERE c.parent = n.node)"
    ).fetchall()
    models = {r[0] for r in con.execute(
        "SELECT gpu_model FROM rate_card UNION SELECT model FROM gpus").fetchall() if r[0]}
    inventory = dict(con.execute(
        "SELECT cluster, count(DISTINCT gpu_uuid) FROM gpus GROUP BY cluster").fetchall())
    max_gpus, skew = _policy_limits(con, policy)

    cfg = stored_config_in_force(con)
    first_days = {name: datetime.combine(c.first_day, datetime.min.time())
                  for name, c in (cfg.clusters.items() if cfg is not None else ()) if c.first_day is not None}
    return JobLimits(
        projects=frozenset(r[0] for r in nodes) if nodes else None,
        models=frozenset(KNOWN_MODELS) | frozenset(models),
        max_gpus_per_job=max_gpus, cluster_gpus=inventory, clock_skew=skew, first_days=first_days,
    )


def text_problem(column: str, value: Any) -> str | None:
    """Why a text field must not land, else None: an escape sequence or NUL in a name reaches every
    terminal table and file name. Every record source checks its text with this."""
    if isinstance(value, str) and not value.isprintable():
        return f"{column}: '{printable(value, limit=60)}' holds control characters; fix the row"
    return None


def job_problem(row: Mapping[str, Any], limits: JobLimits, *, now: datetime,
                project_field: str = "project") -> str | None:
    """Why a parsed ``jobs`` row must not land (the field, the value, the fix), else None.

    ``now`` is the import's time (naive UTC); ``project_field`` names the source's own field
    for the project (Slurm: ``Account``)."""
    for column, value in row.items():
        problem = text_problem(column, value)
        if problem:
            return problem
    cluster = row.get("cluster")
    first_day = limits.first_days.get(cluster) if isinstance(cluster, str) else None
    earliest = max(first_day, EARLIEST) if first_day is not None else EARLIEST
    for column in ("submit_time", "start_time", "end_time"):
        stamp = row.get(column)
        if stamp is not None and stamp < earliest:
            if earliest > EARLIEST:
                return (f"{column}: {stamp:%Y-%m-%d %H:%M:%S} is before cluster {cluster}'s first day "
                        f"{earliest:%Y-%m-%d} (clusters.{cluster}.first_day); fix the source's clock, or the "
                        "day in the config if it is wrong")
            return (f"{column}: {stamp:%Y-%m-%d %H:%M:%S} is before {EARLIEST:%Y-%m-%d}; a clock or unit "
                    "error (epoch milliseconds read as seconds?)")
    for column in ("start_time", "end_time"):
        stamp = row.get(column)
        if stamp is not None and stamp > now + limits.clock_skew:
            return (f"{column}: {stamp:%Y-%m-%d %H:%M:%S} is in the future (imported at "
                    f"{now:%Y-%m-%d %H:%M:%S} UTC, clock skew allowed "
                    f"{limits.clock_skew.total_seconds() / 60:g} min); fix the source's clock or the row")
    gpus = row.get("gpus")
    if gpus is not None and gpus > limits.max_gpus_per_job:
        return (f"gpus: {gpus:g} is more than the {limits.max_gpus_per_job:g} GPUs one job may hold "
                "(policy.jobs.max_gpus_per_job)")
    cluster_total = limits.cluster_gpus.get(row.get("cluster"))
    if gpus is not None and cluster_total and gpus > cluster_total:
        return f"gpus: {gpus:g} is more than cluster {row.get('cluster')!r} has in all ({cluster_total:g} GPUs)"
    model = row.get("gpu_model")
    if model and limits.models is not None:
        unknown = [m for m in str(model).split("+") if m not in limits.models]
        if unknown:
            return (f"gpu_model: {unknown[0]!r} is not a known GPU model; add it to the rate card "
                    "(or the inventory) or fix the row")
    kind = row.get("kind")
    if kind and kind not in limits.kinds:
        return f"kind: {kind!r} is not a job kind; use one of {', '.join(sorted(limits.kinds))}"
    project = row.get("project")
    if limits.projects is not None and project not in limits.projects:
        return (f"{project_field}: {project!r} is not a project of the org tree; add it to the config "
                "or charge the job to a project")
    return None


def screen_jobs(
    frame: pl.DataFrame, limits: JobLimits, *, now: datetime, source: str,
    locations: list[str], raw_texts: list[str] | None = None, project_field: str = "project",
) -> tuple[pl.DataFrame, list[QuarantineRow]]:
    """Split parsed ``jobs`` rows into (rows that may land, quarantine rows with the reason).
    ``locations`` / ``raw_texts`` are per row (raw text defaults to the row as JSON)."""
    if frame.is_empty():
        return frame, []
    keep, rejected = [], []
    for i, row in enumerate(frame.iter_rows(named=True)):
        problem = job_problem(row, limits, now=now, project_field=project_field)
        keep.append(problem is None)
        if problem is not None:
            raw = raw_texts[i] if raw_texts else json.dumps(row, default=str, sort_keys=True)
            rejected.append(QuarantineRow(source, locations[i], raw, problem))
    return frame.filter(pl.Series(keep, dtype=pl.Boolean)), rejected
