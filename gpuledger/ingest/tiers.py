"""Pricing tiers from config rules: which devices (and Slurm jobs) are reserved, on-demand or spot.

A device's tier is decided by, in order:

1. the first rule of ``policy.chargeback.tier_rules`` without a ``partition`` whose conditions all
   match (``cluster`` and ``host`` are globs; ``node_labels`` must all be present with that value);
2. the cloud providers' capacity-type node labels, when the node has one (:data:`CLOUD_CAPACITY_LABELS`:
   Karpenter, EKS managed node groups, GKE Spot / preemptible, AKS spot pools);
3. ``policy.chargeback.default_tier``.

Rules with a ``partition`` (Slurm), and rules that name only a ``cluster``, also price jobs
(``jobs.pricing_tier``): that tier applies to the job-level allocations of jobs the warehouse has
no device for; a job on known devices pays its devices' tier.

Every ingest path that creates devices calls :func:`apply_tier_rules` after registering them (DCGM
scrape and Prometheus backfill via ``store_wide``, the NVML agent, the simulator), the Kubernetes
ingest after storing its nodes' labels, the job importers after writing jobs, and ``config load``
after a new version. Rules are read from the warehouse's stored config, never from a file.
"""

from __future__ import annotations

import fnmatch
import json
from collections.abc import Iterable, Mapping
from datetime import datetime
from typing import Any

import duckdb
import polars as pl

from gpuledger.config import ChargebackPolicy
from gpuledger.config_store import policy_in_force
from gpuledger.rules.hosts import canonical_host

# label → {value → tier}; values compared as written by the provider (EKS upper case).
CLOUD_CAPACITY_LABELS: dict[str, dict[str, str]] = {
    "karpenter.sh/capacity-type": {"spot": "spot", "on-demand": "on-demand", "reserved": "reserved"},
    "eks.amazonaws.com/capacityType": {"SPOT": "spot", "ON_DEMAND": "on-demand", "CAPACITY_BLOCK": "reserved"},
    "cloud.google.com/gke-spot": {"true": "spot"},
    "cloud.google.com/gke-preemptible": {"true": "spot"},
    "kubernetes.azure.com/scalesetpriority": {"spot": "spot"},
}


def _glob(pattern: str | None, value: str | None) -> bool:
    return pattern is None or (value is not None and fnmatch.fnmatchcase(value, pattern))


def device_tier(policy: ChargebackPolicy, *, cluster: str, host: str | None,
                labels: Mapping[str, str] | None = None) -> str:
    """The tier of a device on ``host`` of ``cluster`` whose node carries ``labels``. Pure."""
    labels = labels or {}
    for rule in policy.tier_rules:
        if rule.partition is not None:
            continue
        if (_glob(rule.cluster, cluster) and _glob(rule.host, host)
                and all(labels.get(k) == v for k, v in rule.node_labels.items())):
            return rule.tier
    for label, values in CLOUD_CAPACITY_LABELS.items():
        if (tier := values.get(str(labels.get(label)))) is not None:
            return tier
    return policy.default_tier


def job_tier(policy: ChargebackPolicy, *, cluster: str, partition: str | None) -> str | None:
    """The tier rules give a job with no known device: the first rule naming its ``partition``
    (Slurm) or naming only its ``cluster``; None when no rule does (default_tier applies). Pure."""
    for rule in policy.tier_rules:
        if rule.node_labels or rule.host is not None:
            continue  # about nodes: a job without a device has none
        if rule.partition is not None and not _glob(rule.partition, partition):
            continue
        if rule.partition is None and rule.cluster is None:
            continue
        if _glob(rule.cluster, cluster):
            return rule.tier
    return None


def node_label_rows(nodes: Iterable[Any], *, cluster: str, now: datetime) -> pl.DataFrame:
    """``node_labels`` rows from Kubernetes Node objects (dicts or client models). Pure."""
    rows = []
    for node in nodes:
        node = node.to_dict() if hasattr(node, "to_dict") else node
        meta = node.get("metadata") if isinstance(node, Mapping) else None
        if not isinstance(meta, Mapping) or not isinstance(meta.get("name"), str):
            continue
        labels = meta.get("labels") if isinstance(meta.get("labels"), Mapping) else {}
        rows.append({"cluster": cluster, "host": canonical_host(meta["name"]),
                     "labels_json": json.dumps({str(k): str(v) for k, v in labels.items()}, sort_keys=True),
                     "updated_at": now})
    return pl.DataFrame(rows, schema={"cluster": pl.String, "host": pl.String, "labels_json": pl.String,
                                      "updated_at": pl.Datetime("us")})


def store_node_labels(con: duckdb.DuckDBPyConnection, rows: pl.DataFrame) -> int:
    """Upsert node labels on (cluster, host) and re-apply the tier rules to those clusters."""
    if rows.is_empty():
        return 0
    rows = rows.unique(subset=["cluster", "host"], keep="last")
    con.register("_node_labels", rows.to_arrow())
    try:
        con.execute("INSERT INTO node_labels SELECT cluster, host, labels_json, updated_at FROM _node_labels "
                    "ON CONFLICT (cluster, host) DO UPDATE SET labels_json = excluded.labels_json, "
                    "updated_at = excluded.updated_at")
    finally:
        con.unregister("_node_labels")
    for cluster in rows["cluster"].unique().to_list():
        apply_tier_rules(con, cluster=cluster)
    return rows.height


def _stored_policy(con: duckdb.DuckDBPyConnection) -> ChargebackPolicy:
    return policy_in_force(con).chargeback  # scrape batches call this often: parsed once per version


def apply_tier_rules(con: duckdb.DuckDBPyConnection, policy: ChargebackPolicy | None = None, *,
                     cluster: str | None = None, jobs: bool = True) -> int:
    """Set ``gpus.pricing_tier`` of every device (of ``cluster``) and, with ``jobs``, the
    ``jobs.pricing_tier`` of its jobs from the rules (``policy``, default the warehouse's stored
    config). Sample writers pass ``jobs=False`` (they add devices, not jobs). Returns the number of
    devices whose tier changed."""
    policy = policy or _stored_policy(con)
    hosts = con.execute(
        "SELECT DISTINCT g.cluster, g.host, n.labels_json, g.pricing_tier FROM gpus g "
        "LEFT JOIN node_labels n ON n.cluster = g.cluster AND n.host = g.host "
        "WHERE ? IS NULL OR g.cluster = ?", [cluster, cluster],
    ).fetchall()
    decided = [(c, h, device_tier(policy, cluster=c, host=h, labels=json.loads(lj) if lj else {}), old)
               for c, h, lj, old in hosts]
    changed = [(c, h, tier) for c, h, tier, old in decided if tier != old]
    if changed:
        con.executemany("UPDATE gpus SET pricing_tier = ? WHERE cluster = ? AND host = ?",
                        [(tier, c, h) for c, h, tier in changed])
    if not jobs:
        return len(changed)
    # Jobs: one decision per (cluster, partition); only rows whose tier changes are written.
    parts = con.execute("SELECT DISTINCT cluster, partition FROM jobs WHERE ? IS NULL OR cluster = ?",
                        [cluster, cluster]).fetchall()
    for c, p in parts:
        tier = job_tier(policy, cluster=c, partition=p)
        con.execute("UPDATE jobs SET pricing_tier = ? WHERE cluster = ? AND partition IS NOT DISTINCT FROM ? "
                    "AND pricing_tier IS DISTINCT FROM ?", [tier, c, p, tier])
    return len(changed)
