"""Pools: the sets of lanes a job can be placed on, and which of them are free.

A pool is what a job asks for: ``whole:<model>`` (whole GPUs of a model, on nodes that are not
split), ``mig:<profile>`` (one MIG instance of that profile) or ``shared`` (half of a time-sliced
GPU). A job never changes pool, so each pool is scheduled on its own: a job that cannot be placed
in one pool never holds up another.
"""

from __future__ import annotations

import bisect

from gpuledger.simulator.cluster import GPUS_PER_NODE, Hardware

SHARED = "shared"


def whole(model: str) -> str:
    return f"whole:{model}"


def mig(profile: str) -> str:
    return f"mig:{profile}"


def lane_pools(hw: Hardware) -> list[str]:
    """The pool of every lane, by position."""
    profiles = hw.devices["mig_profile"].to_list()
    out = []
    for d in hw.lane_device:
        node = int(hw.dev_node[d])
        role = hw.node_role[node]
        out.append(mig(profiles[int(d)]) if role == "mig" else SHARED if role == "shared"
                   else whole(hw.node_model[node]))
    return out


def partition_name(pool: str) -> str:
    """The scheduler partition (Slurm) / queue (Kueue) a pool is offered as: gpu-h100,
    mig-1g.10gb, shared-h100 (the time-sliced GPUs are H100s, cluster.build_hardware)."""
    if pool == SHARED:
        return "shared-h100"
    kind, what = pool.split(":", 1)
    return f"gpu-{what.lower()}" if kind == "whole" else f"mig-{what}"


class Placer:
    """Free lanes per pool and node. Whole-GPU jobs of 8 or more take whole nodes; smaller ones go
    best-fit (the node with the fewest free GPUs that fits), keeping whole nodes free for them."""

    def __init__(self, hw: Hardware):
        self.free: dict[str, dict[int, list[int]]] = {}
        self.free_total: dict[str, int] = {}
        self.lane_pool = lane_pools(hw)
        self.lane_node = [int(hw.dev_node[d]) for d in hw.lane_device]
        for lane, pool in enumerate(self.lane_pool):
            self.free.setdefault(pool, {}).setdefault(self.lane_node[lane], []).append(lane)
            self.free_total[pool] = self.free_total.get(pool, 0) + 1
        self.capacity = dict(self.free_total)
        # per whole-GPU pool: how many nodes have n free lanes (n = 0..8), kept as lanes come and go
        self.nodes_with_free = {pool: [0] * (GPUS_PER_NODE + 1) for pool in self.free if pool.startswith("whole:")}
        for pool, counts in self.nodes_with_free.items():
            for lanes in self.free[pool].values():
                counts[len(lanes)] += 1

    def fits(self, pool: str, count: int) -> bool:
        """Whether ``count`` lanes of ``pool`` can be placed now."""
        if self.free_total.get(pool, 0) < count:
            return False
        if not pool.startswith("whole:"):
            return True
        counts = self.nodes_with_free[pool]
        if count >= GPUS_PER_NODE:
            return counts[GPUS_PER_NODE] >= count // GPUS_PER_NODE
        return any(counts[count:])

    def fits_partly_used(self, pool: str, count: int) -> bool:
        """Whether a job of fewer than 8 whole GPUs fits on a node of ``pool`` already in use."""
        return any(self.nodes_with_free[pool][count:GPUS_PER_NODE])

    def _resized(self, pool: str, before: int, after: int) -> None:
        if pool in self.nodes_with_free:
            self.nodes_with_free[pool][before] -= 1
            self.nodes_with_free[pool][after] += 1

    def take(self, pool: str, count: int) -> list[int] | None:
        """Lanes for a job (None when it does not fit now)."""
        if not self.fits(pool, count):
            return None
        nodes = self.free[pool]
        chosen: list[int] = []
        if pool.startswith("whole:") and count >= GPUS_PER_NODE:
            full = sorted(n for n, lanes in nodes.items() if len(lanes) == GPUS_PER_NODE)
            for n in full[:count // GPUS_PER_NODE]:
                chosen += nodes[n]
                nodes[n] = []
                self._resized(pool, GPUS_PER_NODE, 0)
        elif pool.startswith("whole:"):
            free, n = min((len(lanes), n) for n, lanes in nodes.items() if len(lanes) >= count)
            chosen, nodes[n] = nodes[n][:count], nodes[n][count:]
            self._resized(pool, free, free - count)
        else:
            for n in sorted(nodes):
                while nodes[n] and len(chosen) < count:
                    chosen.append(nodes[n].pop(0))
                if len(chosen) == count:
                    break
        self.free_total[pool] -= len(chosen)
        return chosen

    def give_back(self, lanes: list[int]) -> None:
        for lane in lanes:
            pool = self.lane_pool[lane]
            node = self.free[pool][self.lane_node[lane]]
            bisect.insort(node, lane)
            self.free_total[pool] += 1
            self._resized(pool, len(node) - 1, len(node))
