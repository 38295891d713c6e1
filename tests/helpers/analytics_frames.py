"""Builders for small hand-made warehouse frames used by tests/analytics/."""

from __future__ import annotations

from datetime import datetime, timedelta
from decimal import Decimal

import polars as pl

T0 = datetime(2026, 11, 1)


def at(hours: float = 0, minutes: float = 0, base: datetime = T0) -> datetime:
    return base + timedelta(hours=hours, minutes=minutes)


def gpus(rows: list[dict]) -> pl.LazyFrame:
    """rows: gpu_id, and optionally uuid, mig (instance id), profile, fraction, model, tier, cluster,
    first_seen, last_seen, retired_at."""
    return pl.LazyFrame(
        {
            "gpu_id": [r["gpu_id"] for r in rows],
            "cluster": [r.get("cluster", "c1") for r in rows],
            "gpu_uuid": [r.get("uuid", f"GPU-{r['gpu_id']}") for r in rows],
            "mig_instance_id": [r.get("mig", -1) for r in rows],
            "host": [r.get("host", "node1") for r in rows],
            "model": [r.get("model", "H100") for r in rows],
            "mig_profile": [r.get("profile") for r in rows],
            "gpu_fraction": [float(r.get("fraction", 1.0)) for r in rows],
            "pricing_tier": [r.get("tier", "reserved") for r in rows],
            "first_seen": [r.get("first_seen") for r in rows],
            "last_seen": [r.get("last_seen") for r in rows],
            "retired_at": [r.get("retired_at") for r in rows],
        },
        schema_overrides={"gpu_id": pl.Int32, "mig_instance_id": pl.Int32, "mig_profile": pl.String,
                          "first_seen": pl.Datetime("us"), "last_seen": pl.Datetime("us"),
                          "retired_at": pl.Datetime("us"), "gpu_fraction": pl.Float64,
                          **{c: pl.String for c in ("cluster", "gpu_uuid", "host", "model", "pricing_tier")}},
    )


def allocations(rows: list[tuple]) -> pl.LazyFrame:
    """rows: (job_id, gpu_id, start, end or None[, gpu_fraction])."""
    return pl.LazyFrame(
        {
            "cluster": ["c1"] * len(rows),
            "job_id": [r[0] for r in rows],
            "gpu_id": [r[1] for r in rows],
            "start_time": [r[2] for r in rows],
            "end_time": [r[3] for r in rows],
            "gpu_fraction": [float(r[4]) if len(r) > 4 else 1.0 for r in rows],
        },
        schema_overrides={"cluster": pl.String, "job_id": pl.String, "gpu_id": pl.Int32,
                          "start_time": pl.Datetime("us"), "end_time": pl.Datetime("us"), "gpu_fraction": pl.Float64},
    )


def jobs(rows: list[dict]) -> pl.LazyFrame:
    """rows: job_id, project, and optionally user, kind, gpus, min_runtime_s, submit, start, end, namespace."""
    return pl.LazyFrame(
        {
            "cluster": ["c1"] * len(rows),
            "job_id": [r["job_id"] for r in rows],
            "project": [r["project"] for r in rows],
            "user_name": [r.get("user", "alice") for r in rows],
            "kind": [r.get("kind", "training") for r in rows],
            "gpu_model": [r.get("model", "H100") for r in rows],
            "gpus": [float(r.get("gpus", 1)) for r in rows],
            "min_runtime_s": [r.get("min_runtime_s") for r in rows],
            "submit_time": [r.get("submit", r.get("start")) for r in rows],
            "start_time": [r.get("start") for r in rows],
            "end_time": [r.get("end") for r in rows],
            "state": ["RUNNING"] * len(rows),
            "priority": [0] * len(rows),
            "namespace": [r.get("namespace", "research") for r in rows],
        },
        schema_overrides={**{c: pl.String for c in ("cluster", "job_id", "project", "user_name", "kind",
                                                     "gpu_model", "state", "namespace")},
                          "gpus": pl.Float64, "priority": pl.Int64,
                          "min_runtime_s": pl.Int64, "submit_time": pl.Datetime("us"),
                          "start_time": pl.Datetime("us"), "end_time": pl.Datetime("us")},
    )


def samples(rows: list[dict]) -> pl.LazyFrame:
    """rows: gpu_id, ts, and any of sm, gr, util, fb, energy."""
    return pl.LazyFrame(
        {
            "gpu_id": [r["gpu_id"] for r in rows],
            "ts": [r["ts"] for r in rows],
            "sm_active_ratio": [r.get("sm") for r in rows],
            "gr_engine_active_ratio": [r.get("gr") for r in rows],
            "gpu_util_ratio": [r.get("util") for r in rows],
            "fb_used_bytes": [r.get("fb") for r in rows],
            "energy_total_j": [r.get("energy") for r in rows],
        },
        schema_overrides={"gpu_id": pl.Int32, "ts": pl.Datetime("us"), "sm_active_ratio": pl.Float64,
                          "gr_engine_active_ratio": pl.Float64, "gpu_util_ratio": pl.Float64,
                          "fb_used_bytes": pl.Int64, "energy_total_j": pl.Float64},
    )


def every(gpu_id: int, start: datetime, end: datetime, step: timedelta = timedelta(minutes=1), **values) -> list[dict]:
    """A sample each ``step`` in [start, end) with the same values."""
    out, t = [], start
    while t < end:
        out.append({"gpu_id": gpu_id, "ts": t, **values})
        t += step
    return out


def org(rows: list[tuple]) -> pl.LazyFrame:
    """rows: (node, parent, shares)."""
    return pl.LazyFrame(
        {"node": [r[0] for r in rows], "parent": [r[1] for r in rows],
         "kind": ["org" if r[1] is None else "node" for r in rows], "shares": [float(r[2]) for r in rows],
         "description": [None] * len(rows)},
        schema_overrides={"parent": pl.String, "description": pl.String},
    )


def rate_card(rows: list[tuple]) -> pl.LazyFrame:
    """rows: (model, tier, effective_from, price string[, budget_weight])."""
    return pl.LazyFrame(
        {
            "gpu_model": [r[0] for r in rows],
            "tier": [r[1] for r in rows],
            "effective_from": [r[2] for r in rows],
            "price_per_gpu_hour": [Decimal(r[3]) for r in rows],
            "currency": ["USD"] * len(rows),
            "budget_weight": [float(r[4]) if len(r) > 4 else 1.0 for r in rows],
        },
        schema={"gpu_model": pl.String, "tier": pl.String, "effective_from": pl.Datetime("us"),
                "price_per_gpu_hour": pl.Decimal(18, 6), "currency": pl.String, "budget_weight": pl.Float64},
    )


def budgets(rows: list[tuple]) -> pl.LazyFrame:
    """rows: (node, period_start date, period_end date, gpu_hours string)."""
    return pl.LazyFrame(
        {"node": [r[0] for r in rows], "period_start": [r[1] for r in rows], "period_end": [r[2] for r in rows],
         "budget_gpu_hours": [Decimal(r[3]) for r in rows]},
        schema={"node": pl.String, "period_start": pl.Date, "period_end": pl.Date,
                "budget_gpu_hours": pl.Decimal(18, 3)},
    )
