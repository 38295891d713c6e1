"""The GPU inventory as pools of devices, and packing jobs onto them.

A pool is (cluster, model, MIG profile or None). A whole-GPU pool's devices are GPUs; a MIG pool's
devices are MIG instances of one profile (a 3g.40gb instance is 3/7 of its GPU, by
gpuledger.rules.mig): slices pack onto the instances their GPUs are carved into. A job takes
``units`` devices, ``unit_size`` of each: 1.0 for a whole GPU or an instance, less for a shared
GPU (several jobs pack onto one device until it is full). Packing is first fit by device index,
so a run is deterministic.
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass, field

from gpuledger.rules.mig import mig_fraction

EPS = 1e-9


def pool_key(cluster: str, model: str, mig_profile: str | None) -> tuple[str, str, str | None]:
    return (cluster, model, mig_profile or None)


def pool_label(pool: tuple[str, str, str | None]) -> str:
    """``H100`` or ``H100 mig 3g.40gb`` (the cluster is left out; pools of several clusters
    carry it: ``b/H100``)."""
    _cluster, model, profile = pool
    return f"{model} mig {profile}" if profile else model


@dataclass(frozen=True)
class Device:
    device_id: int  # the warehouse's gpu_id, or a running number for an inventory file
    pool: tuple[str, str, str | None]
    fraction: float  # share of its physical GPU (a 3g instance: 3/7)
    gpu_uuid: str  # the physical GPU (MIG instances of one GPU share it)
    tier: str = "reserved"


@dataclass
class Inventory:
    devices: list[Device]

    def pools(self) -> dict[tuple[str, str, str | None], list[Device]]:
        out: dict[tuple[str, str, str | None], list[Device]] = {}
        for d in sorted(self.devices, key=lambda d: d.device_id):
            out.setdefault(d.pool, []).append(d)
        return out

    def physical_gpus(self) -> int:
        return len({(d.pool[0], d.gpu_uuid) for d in self.devices})

    def capacity_gpus(self) -> float:
        """Whole-GPU equivalents installed (Σ device fractions)."""
        return sum(d.fraction for d in self.devices)

    @classmethod
    def from_counts(cls, rows: list[dict]) -> Inventory:
        """From an inventory file's rows: ``{cluster, model, count, mig_profile?, tier?}``; a MIG
        row counts physical GPUs and carves each into as many instances of the profile as fit."""
        devices: list[Device] = []
        for i, row in enumerate(rows):
            for key in ("model", "count"):
                if key not in row:
                    raise ValueError(
                        f"inventory row {i + 1}: `{key}` is missing (need cluster, model, count)"
                    )
            cluster, model = str(row.get("cluster") or "sim"), str(row["model"])
            profile = row.get("mig_profile") or None
            try:
                count = int(row["count"])
            except (TypeError, ValueError):
                raise ValueError(
                    f"inventory row {i + 1}: count {row['count']!r} is not a whole number"
                ) from None
            if count < 0:
                raise ValueError(f"inventory row {i + 1}: count {count} is negative")
            tier = str(row.get("tier") or "reserved")
            fraction = 1.0
            per_gpu = 1
            if profile:
                frac = mig_fraction(profile, model)
                if frac is None:
                    raise ValueError(
                        f"inventory row {i + 1}: mig_profile {profile!r} is no MIG profile of {model}"
                    )
                fraction, per_gpu = frac, max(1, int(1 / frac + EPS))
            for g in range(count):
                uuid = f"{cluster}-{model}-{profile or 'whole'}-{i}-{g}"
                for _ in range(per_gpu):
                    devices.append(
                        Device(len(devices) + 1, pool_key(cluster, model, profile), fraction, uuid, tier)
                    )
        return cls(devices)


@dataclass
class PoolState:
    """Free share per device of one pool; whole-free devices in a heap for whole-unit jobs."""

    device_ids: list[int]
    free: list[float] = field(default_factory=list)
    whole_free: list[int] = field(default_factory=list)  # heap of indices with free == 1
    _in_heap: set[int] = field(default_factory=set)

    def __post_init__(self) -> None:
        self.free = [1.0] * len(self.device_ids)
        self.whole_free = list(range(len(self.device_ids)))
        self._in_heap = set(self.whole_free)
        self.free_units = float(len(self.device_ids))  # Σ free shares

    @property
    def size(self) -> int:
        return len(self.device_ids)

    @property
    def whole_free_units(self) -> int:
        """Devices with nothing on them: all a job of whole devices can use."""
        return len(self._in_heap)

    def fits(self, units: int, unit_size: float) -> bool:
        if unit_size >= 1 - EPS:
            return len(self._in_heap) >= units
        if self.free_units < units * unit_size - EPS:
            return False
        return self._partial_choice(units, unit_size) is not None

    def _partial_choice(self, units: int, unit_size: float) -> list[int] | None:
        chosen = []
        for i, f in enumerate(self.free):
            if f >= unit_size - EPS:
                chosen.append(i)
                if len(chosen) == units:
                    return chosen
        return None

    def take(self, units: int, unit_size: float) -> list[int] | None:
        """Indices of the devices taken (first fit), or None when the job does not fit."""
        if unit_size >= 1 - EPS:
            if len(self._in_heap) < units:
                return None
            chosen = []
            while len(chosen) < units:
                i = heapq.heappop(self.whole_free)
                if i in self._in_heap:
                    self._in_heap.discard(i)
                    chosen.append(i)
            for i in chosen:
                self.free[i] = 0.0
            self.free_units -= units
            return chosen
        chosen = self._partial_choice(units, unit_size)
        if chosen is None:
            return None
        for i in chosen:
            self.free[i] -= unit_size
            self._in_heap.discard(i)  # no longer wholly free (stale heap entries are skipped)
        self.free_units -= units * unit_size
        return chosen

    def give_back(self, indices: list[int], unit_size: float) -> None:
        for i in indices:
            self.free[i] = min(1.0, self.free[i] + unit_size)
            if self.free[i] >= 1 - EPS and i not in self._in_heap:
                self.free[i] = 1.0
                self._in_heap.add(i)
                heapq.heappush(self.whole_free, i)
        self.free_units += len(indices) * unit_size
