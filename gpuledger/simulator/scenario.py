"""A simulated cluster: hardware + org config + job stream, all fixed by (seed, arguments)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from gpuledger.config import Config, load_config
from gpuledger.simulator.cluster import Hardware, build_hardware
from gpuledger.simulator.demand import REGIME, regime_named
from gpuledger.simulator.workload import Workload, simulate_workload

from gpuledger.simulator.defaults import DEFAULT_CLUSTER, DEFAULT_START  # noqa: F401, E402


def to_epoch_s(moment: datetime) -> int:
    """Epoch seconds of a naive-UTC (or aware) datetime."""
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return int(moment.timestamp())


def from_epoch_s(seconds: int) -> datetime:
    """Naive UTC datetime (the warehouse's convention) from epoch seconds."""
    return datetime(1970, 1, 1) + timedelta(seconds=int(seconds))


@dataclass
class SimCluster:
    """Everything the outputs need; sample values are pure functions of it and a timestamp."""

    seed: int
    cluster: str
    interval_s: int
    start_s: int  # window start, epoch s (UTC)
    end_s: int  # window end (exclusive)
    dirt: bool
    config: Config
    hardware: Hardware
    workload: Workload

    @property
    def start(self) -> datetime:
        return from_epoch_s(self.start_s)

    @property
    def end(self) -> datetime:
        return from_epoch_s(self.end_s)


def build_cluster(
    *,
    seed: int = 1,
    gpus: int = 256,
    start: datetime = DEFAULT_START,
    days: float = 7.0,
    interval_s: int = 30,
    cluster: str = DEFAULT_CLUSTER,
    config: Config | None = None,
    dirt: bool = True,
    regime: str = REGIME,
) -> SimCluster:
    """Build the deterministic cluster: ``gpus`` GPUs (8 per node), jobs for ``days`` from ``start``
    (naive UTC) drawn from the demand ``regime`` (demand.REGIMES), samples every ``interval_s``
    seconds. Same arguments => same cluster."""
    if interval_s <= 0:
        raise ValueError(f"interval_s must be positive, not {interval_s}")
    regime_named(regime)  # an unknown name fails before the hardware is built
    cfg = config or load_config()
    start_s = to_epoch_s(start)
    start_s -= start_s % interval_s
    end_s = start_s + int(days * 86400)
    hw = build_hardware(seed, gpus, cluster, start_s, end_s - start_s)
    wl = simulate_workload(cfg, hw, seed, start_s, end_s, regime)
    return SimCluster(seed, cluster, interval_s, start_s, end_s, dirt, cfg, hw, wl)
