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


# The cloud providers' capacity-type node labels the simulator puts on some nodes, so the tier rules
# (gpuledger.ingest.tiers) have real input: one label style per provider.
_SPOT_LABELS = ({"karpenter.sh/capacity-type": "spot"}, {"cloud.google.com/gke-spot": "true"})
_ON_DEMAND_LABELS = ({"eks.amazonaws.com/capacityType": "ON_DEMAND"}, {"karpenter.sh/capacity-type": "on-demand"})


def node_labels(sim) -> dict[str, dict[str, str]]:
    """Host → Kubernetes node labels. The time-sliced node says so (two replicas per GPU). Whole-GPU nodes at position 5 of every 8 are spot and at
    position 6 on-demand (alternating label styles), where the config's rate card prices that model
    and tier; every other node carries no capacity label (so it gets the default tier, reserved)."""
    hw = sim.hardware
    priced = {(r.gpu_model, r.tier) for r in sim.config.rate_card}
    out: dict[str, dict[str, str]] = {}
    for i, host in enumerate(hw.node_host):
        labels = {"nvidia.com/gpu.product": hw.node_model[i], "kubernetes.io/hostname": host}
        if hw.node_role[i] == "shared":  # as the GPU operator's time-slicing config labels a node
            labels |= {"nvidia.com/gpu.sharing-strategy": "time-slicing", "nvidia.com/gpu.replicas": "2"}
        if hw.node_role[i] == "whole":
            if i % 8 == 5 and (hw.node_model[i], "spot") in priced:
                labels |= _SPOT_LABELS[(i // 8) % 2]
            elif i % 8 == 6 and (hw.node_model[i], "on-demand") in priced:
                labels |= _ON_DEMAND_LABELS[(i // 8) % 2]
        out[host] = labels
    return out
