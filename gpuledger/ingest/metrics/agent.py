"""The NVML agent's loop: sample this node's GPUs every interval, write every few rounds."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from datetime import datetime
from typing import Any

from gpuledger import warehouse
from gpuledger.ingest.metrics.nvml import (
    DeviceReading,
    NoGpuError,
    read_devices,
    readings_frames,
    sample_ts,
    shutdown,
    start,
    write_readings,
)


def run_agent(
    *,
    warehouse_file,
    cluster: str,
    host: str,
    interval_s: float,
    rounds_per_write: int,
    count: int = 0,
    nvml: Any = None,
    stop: threading.Event | None = None,
    clock: Callable[[], datetime] = sample_ts,
    on_write: Callable[[int], None] | None = None,
) -> int:
    """Sample every ``interval_s`` seconds, writing every ``rounds_per_write`` rounds, until ``count``
    rounds (0 = forever) or ``stop``. Returns the sample rows written. ``nvml`` defaults to pynvml.

    Raises NoDriverError when NVML cannot start.
    """
    nvml = start(nvml)
    stop = stop or threading.Event()
    pending: list[tuple[datetime, list[DeviceReading]]] = []
    written = 0

    def flush() -> None:
        nonlocal written, pending
        if not pending:
            return
        inventory, samples = readings_frames(pending, cluster=cluster, host=host)
        with warehouse.open_writer(warehouse_file) as con:
            new = write_readings(con, inventory, samples)
        written += new
        pending = []
        if on_write:
            on_write(new)

    try:
        taken = 0
        while not stop.is_set():
            began = time.monotonic()
            readings = read_devices(nvml)
            if not readings and taken == 0:
                raise NoGpuError("NVML reports no GPUs")
            pending.append((clock(), readings))
            taken += 1
            if len(pending) >= rounds_per_write:
                flush()
            if count and taken >= count:
                break
            stop.wait(max(0.0, interval_s - (time.monotonic() - began)))
    finally:
        try:
            flush()
        finally:
            shutdown(nvml)
    return written
