"""The NVML agent: sample this host's GPUs through ``pynvml`` into ``gpus`` / ``gpu_samples``.

Three layers, so the mapping is testable without a GPU:

* :func:`read_devices` asks an NVML module (``pynvml``, or any object with its functions) for
  one reading per device — whole GPUs, and each MIG instance where MIG is on.
* :func:`readings_frames` turns readings into the warehouse's inventory and sample frames (pure).
* :func:`write_readings` registers the devices and writes the samples (source ``"nvml"``).

Units follow the warehouse: utilisation percent → ratio, power mW → W, energy mJ → J, memory bytes.
A reading NVML does not support on a device (utilisation and power on MIG instances, energy on old
boards) is NULL, never 0. With MIG on, the physical GPU keeps its own row (mig_instance_id -1)
holding the device-level power and energy, and each instance gets a row with its memory and its
compute share (``gpu_fraction``), so power and energy are not repeated on every instance.
"""

from __future__ import annotations

import re
import socket
from collections.abc import Iterable
from dataclasses import asdict, dataclass
from datetime import datetime
from types import ModuleType
from typing import Any

import polars as pl

from gpuledger import warehouse
from gpuledger.ingest.metrics.plausible import split_implausible_times
from gpuledger.ingest.tiers import apply_tier_rules
from gpuledger.rules.clock import utc_now
from gpuledger.rules.hosts import canonical_host
from gpuledger.rules.mig import mig_fraction
from gpuledger.rules.model_keys import gpu_model_key

SOURCE = "nvml"
_MIG_NAME = re.compile(r"MIG\s+(\S+)")


class NoDriverError(RuntimeError):
    """NVML cannot start on this host: no driver, no library, or no permission."""


class NoGpuError(NoDriverError):
    """NVML started but reports no GPU on this host."""


@dataclass(frozen=True)
class DeviceReading:
    """One device at one moment, already in warehouse units."""

    gpu_uuid: str  # the physical GPU's UUID, also for MIG instances
    mig_instance_id: int  # GPU instance id; -1 = the whole GPU
    gpu_index: int
    pci_bus_id: str | None
    model_name: str | None
    mig_profile: str | None
    gpu_fraction: float
    gpu_util_ratio: float | None
    fb_used_bytes: int | None
    fb_total_bytes: int | None
    power_w: float | None
    energy_total_j: float | None


def _text(value: Any) -> str | None:
    if value is None:
        return None
    return value.decode(errors="replace") if isinstance(value, bytes) else str(value)


def _try(nvml: Any, call, *args):
    """The call's value, or None where NVML says it is not supported / not available here."""
    try:
        return call(*args)
    except getattr(nvml, "NVMLError", Exception):
        return None


def start(nvml: Any = None) -> Any:
    """``nvmlInit`` on the given module (default: ``pynvml``); NoDriverError names NVML's reason."""
    if nvml is None:
        try:
            import pynvml as nvml  # lazy: optional: its absence is handled here
        except ImportError as exc:  # the nvidia-ml-py package itself is missing
            raise NoDriverError("the nvidia-ml-py package is not installed: "
                                f"pip install 'gpuledger[agent]' ({exc})") from None
    try:
        nvml.nvmlInit()
    except getattr(nvml, "NVMLError", Exception) as exc:
        raise NoDriverError(f"NVML: {exc}") from None
    except OSError as exc:  # a broken libnvidia-ml.so
        raise NoDriverError(f"NVML: {exc}") from None
    return nvml


def _memory(nvml: Any, handle) -> tuple[int | None, int | None]:
    info = _try(nvml, nvml.nvmlDeviceGetMemoryInfo, handle)
    if info is None:
        return None, None
    return int(info.used), int(info.total)


def _util(nvml: Any, handle) -> float | None:
    rates = _try(nvml, nvml.nvmlDeviceGetUtilizationRates, handle)
    return None if rates is None else float(rates.gpu) / 100.0


def read_devices(nvml: Any) -> list[DeviceReading]:
    """Read every GPU (and MIG instance) from an initialised NVML module. I/O: talks to the driver."""
    readings: list[DeviceReading] = []
    for index in range(nvml.nvmlDeviceGetCount()):
        handle = nvml.nvmlDeviceGetHandleByIndex(index)
        uuid = _text(nvml.nvmlDeviceGetUUID(handle))
        name = _text(_try(nvml, nvml.nvmlDeviceGetName, handle))
        pci = _try(nvml, nvml.nvmlDeviceGetPciInfo, handle)
        bus_id = _text(getattr(pci, "busId", None)) if pci is not None else None
        used, total = _memory(nvml, handle)
        power_mw = _try(nvml, nvml.nvmlDeviceGetPowerUsage, handle)
        energy_mj = _try(nvml, nvml.nvmlDeviceGetTotalEnergyConsumption, handle)
        readings.append(
            DeviceReading(
                gpu_uuid=uuid,
                mig_instance_id=-1,
                gpu_index=index,
                pci_bus_id=bus_id,
                model_name=name,
                mig_profile=None,
                gpu_fraction=1.0,
                gpu_util_ratio=_util(nvml, handle),
                fb_used_bytes=used,
                fb_total_bytes=total,
                power_w=None if power_mw is None else power_mw / 1000.0,
                energy_total_j=None if energy_mj is None else energy_mj / 1000.0,
            )
        )
        mode = _try(nvml, nvml.nvmlDeviceGetMigMode, handle)
        current = mode[0] if isinstance(mode, list | tuple) else mode
        if current != getattr(nvml, "NVML_DEVICE_MIG_ENABLE", 1):
            continue
        for slot in range(_try(nvml, nvml.nvmlDeviceGetMaxMigDeviceCount, handle) or 0):
            mig = _try(nvml, nvml.nvmlDeviceGetMigDeviceHandleByIndex, handle, slot)
            if mig is None:  # an empty slot
                continue
            instance_id = _try(nvml, nvml.nvmlDeviceGetGpuInstanceId, mig)
            if instance_id is None:
                continue
            mig_name = _text(_try(nvml, nvml.nvmlDeviceGetName, mig)) or ""
            match = _MIG_NAME.search(mig_name)
            profile = match.group(1) if match else None
            mig_used, mig_total = _memory(nvml, mig)
            readings.append(
                DeviceReading(
                    gpu_uuid=uuid,
                    mig_instance_id=int(instance_id),
                    gpu_index=index,
                    pci_bus_id=bus_id,
                    model_name=name,
                    mig_profile=profile,
                    gpu_fraction=(mig_fraction(profile, name) if profile else None) or 1.0,
                    gpu_util_ratio=_util(nvml, mig),  # NVML reports none on MIG: NULL
                    fb_used_bytes=mig_used,
                    fb_total_bytes=mig_total,
                    power_w=None,
                    energy_total_j=None,
                )
            )
    return readings


INVENTORY_SCHEMA = {
    "cluster": pl.String,
    "gpu_uuid": pl.String,
    "mig_instance_id": pl.Int32,
    "host": pl.String,
    "gpu_index": pl.Int32,
    "pci_bus_id": pl.String,
    "model": pl.String,
    "model_name": pl.String,
    "mig_profile": pl.String,
    "gpu_fraction": pl.Float64,
    "framebuffer_total_bytes": pl.Int64,
    "first_seen": pl.Datetime("us"),
    "last_seen": pl.Datetime("us"),
}
SAMPLE_SCHEMA = {
    "gpu_uuid": pl.String,
    "mig_instance_id": pl.Int32,
    "ts": pl.Datetime("us"),
    "gpu_util_ratio": pl.Float64,
    "fb_used_bytes": pl.Int64,
    "fb_total_bytes": pl.Int64,
    "power_w": pl.Float64,
    "energy_total_j": pl.Float64,
}


def readings_frames(
    rounds: Iterable[tuple[datetime, list[DeviceReading]]], *, cluster: str, host: str
) -> tuple[pl.DataFrame, pl.DataFrame]:
    """(inventory, samples) for ``register_gpus`` / ``write_samples``. Pure.

    ``rounds`` are (timestamp as naive UTC, readings) pairs; the samples frame is keyed by
    (gpu_uuid, mig_instance_id, ts) until ``register_gpus`` gives each device its gpu_id.
    """
    inventory: dict[tuple[str, int], dict] = {}
    samples: list[dict] = []
    for ts, readings in rounds:
        for r in readings:
            key = (r.gpu_uuid, r.mig_instance_id)
            seen = inventory.get(key)
            inventory[key] = {
                "cluster": cluster,
                "gpu_uuid": r.gpu_uuid,
                "mig_instance_id": r.mig_instance_id,
                "host": host,
                "gpu_index": r.gpu_index,
                "pci_bus_id": r.pci_bus_id,
                "model": gpu_model_key(r.model_name) or "UNKNOWN",
                "model_name": r.model_name,
                "mig_profile": r.mig_profile,
                "gpu_fraction": r.gpu_fraction,
                "framebuffer_total_bytes": r.fb_total_bytes,
                "first_seen": min(ts, seen["first_seen"]) if seen else ts,
                "last_seen": max(ts, seen["last_seen"]) if seen else ts,
            }
            row = asdict(r)
            samples.append({k: row[k] for k in SAMPLE_SCHEMA if k in row} | {"ts": ts})
    return (
        pl.DataFrame(list(inventory.values()), schema=INVENTORY_SCHEMA, orient="row"),
        pl.DataFrame(samples, schema=SAMPLE_SCHEMA, orient="row"),
    )


def write_readings(con, inventory: pl.DataFrame, samples: pl.DataFrame) -> int:
    """Register the devices, then store the samples under their gpu_id. Returns new sample rows.
    Samples stamped outside the plausibility window (this node's clock at 1970, or ahead of the
    allowed skew) are quarantined, as every DCGM source's are (plausible.py)."""
    if inventory.is_empty():
        return 0

    samples, refused = split_implausible_times(samples, source=SOURCE, location=f"nvml {local_host()}")
    if refused:
        warehouse.quarantine(con, refused)
        seen = samples.group_by("gpu_uuid", "mig_instance_id").agg(
            pl.col("ts").min().alias("first_seen"), pl.col("ts").max().alias("last_seen"))
        inventory = inventory.drop("first_seen", "last_seen").join(seen, on=["gpu_uuid", "mig_instance_id"])
        if inventory.is_empty():
            return 0
    ids = warehouse.register_gpus(con, inventory).select("gpu_uuid", "mig_instance_id", "gpu_id")

    for cluster in inventory["cluster"].unique().to_list():
        apply_tier_rules(con, cluster=cluster, jobs=False)  # pricing tier from the stored config's rules
    keyed = samples.join(ids, on=["gpu_uuid", "mig_instance_id"], how="inner")
    return warehouse.write_samples(con, keyed.drop("gpu_uuid", "mig_instance_id"), source=SOURCE)


def local_host() -> str:
    """The canonical host name: short and lower case, as the warehouse keeps it."""
    return canonical_host(socket.gethostname()) or "localhost"


def sample_ts() -> datetime:
    """Now as naive UTC, to the second (one sample per device per second at most)."""
    return utc_now().replace(microsecond=0)


def shutdown(nvml: ModuleType | Any) -> None:
    _try(nvml, nvml.nvmlShutdown)
