"""The simulated hardware: 8-GPU nodes of H100 / B200 / B300, some MIG-split, one time-sliced.

Devices are what the scheduler hands out and what the warehouse calls a GPU row: a whole GPU or one
MIG instance. *Lanes* are the slots placement fills: one per device, two per time-sliced (shared)
GPU, where each job holds half the GPU.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import polars as pl

from gpuledger.rules.mig import mig_fraction
from gpuledger.simulator.noise import SALT, hash64

GPUS_PER_NODE = 8
DRIVER_VERSION = "580.95.05"
PCI_BUSES = ("18", "2A", "3A", "5D", "9A", "AB", "BA", "DB")


@dataclass(frozen=True)
class GpuModel:
    """A GPU model: rate-card key, exporter modelName, framebuffer (MiB), power (W), SM clock (MHz)."""

    key: str
    model_name: str
    fb_total_mib: int
    fb_reserved_mib: int
    idle_w: float
    tdp_w: float
    max_sm_clock_mhz: int


MODELS = {
    "H100": GpuModel("H100", "NVIDIA H100 80GB HBM3", 81559, 512, 72.0, 700.0, 1980),
    "B200": GpuModel("B200", "NVIDIA B200", 183359, 1024, 140.0, 1000.0, 1965),
    "B300": GpuModel("B300", "NVIDIA B300 SXM6 AC", 275040, 1024, 160.0, 1100.0, 2032),
}
# Share of nodes per model (racks are homogeneous: nodes come in blocks).
MODEL_MIX = (("H100", 0.5), ("B200", 0.3), ("B300", 0.2))

# A100/H100-style MIG profiles: name -> (compute slices of 7, memory MiB, first GPU_I_ID).
MIG_PROFILES = {
    "1g.10gb": (1, 9984, 7),
    "2g.20gb": (2, 20096, 3),
    "3g.40gb": (3, 40320, 1),
    "4g.40gb": (4, 40320, 5),
    "7g.80gb": (7, 80896, 0),
}
# Layouts that fill 7 slices, cycled over the GPUs of a MIG node.
MIG_LAYOUTS = (
    ("1g.10gb",) * 7,
    ("3g.40gb", "2g.20gb", "1g.10gb", "1g.10gb"),
    ("4g.40gb", "3g.40gb"),
    ("2g.20gb", "2g.20gb", "2g.20gb", "1g.10gb"),
    ("1g.10gb",) * 7,
    ("3g.40gb", "3g.40gb", "1g.10gb"),
    ("7g.80gb",),
    ("2g.20gb", "2g.20gb", "3g.40gb"),
)


@dataclass
class Hardware:
    """Nodes, devices and lanes of the simulated cluster (numpy arrays indexed by position)."""

    cluster: str
    seed: int
    node_host: list[str]
    node_model: list[str]
    node_role: list[str]  # whole / mig / shared
    node_new_exporter_at: np.ndarray  # epoch s when the node's exporter switches to `hostname` FQDN (or max)
    devices: pl.DataFrame  # one row per device, see build_hardware
    # per device
    dev_node: np.ndarray = field(repr=False, default=None)
    dev_phys: np.ndarray = field(repr=False, default=None)  # index of the physical GPU
    dev_fraction: np.ndarray = field(repr=False, default=None)
    dev_fb_total_mib: np.ndarray = field(repr=False, default=None)
    dev_is_mig: np.ndarray = field(repr=False, default=None)
    # per physical GPU
    phys_idle_w: np.ndarray = field(repr=False, default=None)
    phys_tdp_w: np.ndarray = field(repr=False, default=None)
    phys_node: np.ndarray = field(repr=False, default=None)
    phys_max_clock: np.ndarray = field(repr=False, default=None)
    # per lane
    lane_device: np.ndarray = field(repr=False, default=None)
    lane_share: np.ndarray = field(repr=False, default=None)  # share of the device a lane holds

    @property
    def n_devices(self) -> int:
        return self.devices.height

    @property
    def n_phys(self) -> int:
        return len(self.phys_idle_w)

    def inventory(self) -> pl.DataFrame:
        """Rows for warehouse.register_gpus (gpus table columns)."""
        return self.devices.select(
            "cluster", "gpu_uuid", "mig_instance_id", "host", "gpu_index", "pci_bus_id", "model",
            "model_name", "mig_profile", "gpu_fraction", "framebuffer_total_bytes", "pricing_tier",
        )


def _uuid(seed: int, phys: int) -> str:
    h = int(hash64(seed, SALT["uuid"], phys))
    g = int(hash64(seed, SALT["uuid"], phys, 1))
    text = f"{h:016x}{g:016x}"
    return f"GPU-{text[:8]}-{text[8:12]}-{text[12:16]}-{text[16:20]}-{text[20:32]}"


def _node_models(n_nodes: int) -> list[str]:
    counts = [int(round(share * n_nodes)) for _, share in MODEL_MIX]
    counts[0] += n_nodes - sum(counts)
    out: list[str] = []
    for (model, _), count in zip(MODEL_MIX, counts, strict=True):
        out += [model] * max(count, 0)
    return out[:n_nodes]


def build_hardware(seed: int, gpus: int, cluster: str, start_s: int, span_s: int) -> Hardware:
    """Nodes of 8 GPUs (``gpus`` rounded up to a multiple of 8, at least 8).

    About 6 % of nodes (at least one H100 node once there are 4 nodes) are MIG-split for inference,
    one H100 node is time-sliced (two half-GPU lanes per GPU) once there are 8 nodes, and every
    fourth node's exporter is upgraded during the run, switching its host label from
    ``Hostname="node-NNN"`` to ``hostname="node-NNN.cluster.local"`` (``start_s``/``span_s`` in epoch s).
    """
    n_nodes = max(1, -(-gpus // GPUS_PER_NODE))
    models = _node_models(n_nodes)
    h100_nodes = [i for i, m in enumerate(models) if m == "H100"]
    roles = ["whole"] * n_nodes
    n_mig = 0 if n_nodes < 4 else max(1, round(n_nodes * 0.06))
    for i in h100_nodes[-n_mig:] if n_mig else []:
        roles[i] = "mig"
    if n_nodes >= 8:
        shared = [i for i in h100_nodes if roles[i] == "whole"]
        if shared:
            roles[shared[-1]] = "shared"
    hosts = [f"node-{i:03d}" for i in range(n_nodes)]
    upgraded = [i for i in range(n_nodes) if i % 4 == 3]
    new_at = np.full(n_nodes, np.iinfo(np.int64).max, dtype=np.int64)
    for k, i in enumerate(upgraded):
        new_at[i] = start_s + int(span_s * (0.125 + 0.75 * k / max(1, len(upgraded))))

    rows = []
    phys_rows = []
    lanes_dev, lanes_share = [], []
    for node in range(n_nodes):
        model = MODELS[models[node]]
        for g in range(GPUS_PER_NODE):
            phys = node * GPUS_PER_NODE + g
            uuid = _uuid(seed, phys)
            phys_rows.append((model.idle_w, model.tdp_w, node, model.max_sm_clock_mhz))
            base = dict(cluster=cluster, gpu_uuid=uuid, host=hosts[node], gpu_index=g,
                        pci_bus_id=f"00000000:{PCI_BUSES[g]}:00.0", model=model.key,
                        model_name=model.model_name, pricing_tier="reserved", node=node, phys=phys)
            if roles[node] == "mig":
                layout = MIG_LAYOUTS[g % len(MIG_LAYOUTS)]
                next_id: dict[str, int] = {}
                for profile in layout:
                    slices, mem_mib, first_id = MIG_PROFILES[profile]
                    gi = next_id.get(profile, first_id)
                    next_id[profile] = gi + 1
                    lanes_dev.append(len(rows))
                    lanes_share.append(1.0)
                    rows.append(base | dict(mig_instance_id=gi, mig_profile=profile,
                                            gpu_fraction=mig_fraction(profile, model.key), fb_total_mib=mem_mib,
                                            fb_reserved_mib=0))
            else:
                n_lanes = 2 if roles[node] == "shared" else 1
                for _ in range(n_lanes):
                    lanes_dev.append(len(rows))
                    lanes_share.append(1.0 / n_lanes)
                rows.append(base | dict(mig_instance_id=-1, mig_profile=None, gpu_fraction=1.0,
                                        fb_total_mib=model.fb_total_mib - model.fb_reserved_mib,
                                        fb_reserved_mib=model.fb_reserved_mib))
    devices = pl.DataFrame(rows, schema_overrides={"mig_instance_id": pl.Int32, "gpu_index": pl.Int32,
                                                     "mig_profile": pl.String})
    devices = devices.with_columns(
        ((pl.col("fb_total_mib") + pl.col("fb_reserved_mib")) * 2**20).cast(pl.Int64)
        .alias("framebuffer_total_bytes"),
        pl.int_range(pl.len(), dtype=pl.Int32).alias("device_idx"),
    )
    phys = np.array(phys_rows, dtype=np.float64)
    return Hardware(
        cluster=cluster, seed=seed, node_host=hosts, node_model=models, node_role=roles,
        node_new_exporter_at=new_at, devices=devices,
        dev_node=devices["node"].to_numpy(), dev_phys=devices["phys"].to_numpy(),
        dev_fraction=devices["gpu_fraction"].to_numpy(),
        dev_fb_total_mib=devices["fb_total_mib"].to_numpy().astype(np.float64),
        dev_is_mig=(devices["mig_instance_id"].to_numpy() >= 0),
        phys_idle_w=phys[:, 0], phys_tdp_w=phys[:, 1], phys_node=phys[:, 2].astype(np.int64),
        phys_max_clock=phys[:, 3],
        lane_device=np.array(lanes_dev, dtype=np.int64), lane_share=np.array(lanes_share),
    )
