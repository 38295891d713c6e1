"""Dirt that real DCGM scrapes contain (design.md), planted deterministically.

* scrape gaps: a node's samples missing for 2-15 minutes (about 3 % of node-hours)
* an energy counter reset: one node's driver reload half-way through the window
* sentinel "blank" values near 2^63 in a few fields (about 1 in 20,000 values)
* the same GPU under two host label spellings: every fourth node's exporter is upgraded during the
  window and switches from ``Hostname="node-003"`` to ``hostname="node-003.cluster.local"``
* late and duplicated samples: about 2 % of 10-minute node blocks arrive one write later (and a
  copy of them is delivered twice)

Every choice is a pure function of (seed, node or device, timestamp), so all outputs agree.
"""

from __future__ import annotations

import numpy as np

from gpuledger.ingest.metrics.dcgm_fields import DCGM_INT64_BLANK
from gpuledger.simulator.noise import SALT, uniform

GAP_NODE_HOUR_RATE = 0.03
SENTINEL_RATE = 5e-5
LATE_BLOCK_RATE = 0.02
LATE_BLOCK_S = 600
FQDN_SUFFIX = ".cluster.local"
# Fields that get blanks, with the raw value the exporter would print.
SENTINEL_FIELDS = {
    "DCGM_FI_DEV_FB_USED": float(DCGM_INT64_BLANK),
    "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION": float(DCGM_INT64_BLANK + 2),
    "DCGM_FI_DEV_POWER_USAGE": float(2**63),
    "DCGM_FI_PROF_SM_ACTIVE": float(2**63),
}


def energy_reset_at(sim) -> np.ndarray:
    """Epoch s at which each physical GPU's energy counter restarts from 0 (int64 max: never).

    One node's driver is reloaded at about 55 % of the window (none without dirt)."""
    hw = sim.hardware
    out = np.full(hw.n_phys, np.iinfo(np.int64).max, dtype=np.int64)
    if not sim.dirt:
        return out
    n_nodes = len(hw.node_host)
    node = int(uniform(sim.seed, SALT["reset"]) * n_nodes)
    at = sim.start_s + int((sim.end_s - sim.start_s) * 0.55)
    at -= at % sim.interval_s
    out[hw.phys_node == node] = at + sim.interval_s // 2  # between two samples
    return out


def gap_mask(sim, node: np.ndarray, t: np.ndarray) -> np.ndarray:
    """True where a node's scrape is missing (node and t broadcast together; t in epoch s)."""
    if not sim.dirt:
        return np.zeros(np.broadcast_shapes(np.shape(node), np.shape(t)), dtype=bool)
    hour = t // 3600
    hit = uniform(sim.seed, SALT["gap"], node, hour) < GAP_NODE_HOUR_RATE
    length = 120 + (uniform(sim.seed, SALT["gaplen"], node, hour) * 780).astype(np.int64)
    offset = (uniform(sim.seed, SALT["gaplen"], node, hour, 1) * (3600 - length)).astype(np.int64)
    into = t - hour * 3600
    return hit & (into >= offset) & (into < offset + length)


def sentinel_mask(sim, metric: str, device: np.ndarray, t: np.ndarray) -> np.ndarray:
    """True where ``metric`` reads as a DCGM blank for a device at t."""
    if not sim.dirt or metric not in SENTINEL_FIELDS:
        return np.zeros(np.broadcast_shapes(np.shape(device), np.shape(t)), dtype=bool)
    salt = sorted(SENTINEL_FIELDS).index(metric)
    return uniform(sim.seed, SALT["sentinel"], salt, device, t) < SENTINEL_RATE


def late_mask(sim, node: np.ndarray, t: np.ndarray) -> np.ndarray:
    """True where a node's samples arrive late (one write later than their time says)."""
    if not sim.dirt:
        return np.zeros(np.broadcast_shapes(np.shape(node), np.shape(t)), dtype=bool)
    return uniform(sim.seed, SALT["late"], node, t // LATE_BLOCK_S) < LATE_BLOCK_RATE


def uses_new_host_label(sim, node: np.ndarray, t: np.ndarray) -> np.ndarray:
    """True where a node's exporter already labels with ``hostname`` (FQDN) instead of ``Hostname``."""
    switch = sim.hardware.node_new_exporter_at[node]
    if not sim.dirt:
        return np.zeros(np.broadcast_shapes(np.shape(node), np.shape(t)), dtype=bool)
    return t >= switch

