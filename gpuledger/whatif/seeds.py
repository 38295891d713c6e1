"""Several seeds of one what-if (issue 34): each seed a trace of its own — a simulated warehouse
built for it (cached: the simulator is deterministic for its arguments and source), or one
warehouse's jobs with that seed's draws for the never-started ones — replayed under every policy.

The what-if reads the warehouses as any other: jobs, allocations, the hourly rollup; nothing of the
generator's internals, so the same code runs on any generator's output and on real data.
"""

from __future__ import annotations

import hashlib
from datetime import datetime
from pathlib import Path

import gpuledger.simulator as sim
from gpuledger import warehouse
from gpuledger.config import load_config
from gpuledger.ledger.config_versions import ensure_config
from gpuledger.simulator.demand import REGIME, regime_named
from gpuledger.simulator.scenario import build_cluster
from gpuledger.simulator.to_warehouse import write_simulation

SIM_INTERVAL_S = 300  # the what-if reads hourly activity: 5-minute samples say as much as 30-s ones


def simulator_fingerprint(config=None) -> str:
    """Eight hex digits over the simulator's source (and the config it simulates): a cached
    warehouse of another generator or config is never taken for this one's."""
    digest = hashlib.sha1()
    for path in sorted(Path(sim.__file__).parent.rglob("*.py")):
        digest.update(path.name.encode())
        digest.update(path.read_bytes())
    if config is not None:  # what it sets, not the schema's defaults: a new setting keeps the cache
        digest.update(config.model_dump_json(exclude_defaults=True).encode())
    return digest.hexdigest()[:8]


def warehouse_name(fingerprint: str, *, gpus: int, days: float, seed: int, start: datetime, interval_s: int,
                   regime: str) -> str:
    """The cached warehouse's file name: the simulator's fingerprint and every argument it was
    built from, the demand regime first (a warehouse of one regime is never taken for another's)."""
    return f"sim-{fingerprint}-{regime}-g{gpus}-d{days:g}-s{seed}-{start:%Y%m%d}-i{interval_s}.duckdb"


def simulated_warehouse(folder: Path, *, gpus: int, days: float, seed: int, start: datetime,
                        interval_s: int = SIM_INTERVAL_S, config=None, regime: str = REGIME) -> Path:
    """The simulated warehouse of (gpus, days, seed, start, demand regime), built into ``folder``
    unless a finished one is there (``.done`` beside it). Returns its path."""
    regime_named(regime)  # an unknown name fails before anything is written
    folder.mkdir(parents=True, exist_ok=True)
    cfg = config or load_config()
    name = warehouse_name(simulator_fingerprint(cfg), gpus=gpus, days=days, seed=seed, start=start,
                          interval_s=interval_s, regime=regime)
    path = folder / name
    done = path.with_name(path.name + ".done")
    if path.exists() and done.exists():
        with warehouse.open_writer(path):  # a warehouse built before a migration: brought up to date
            pass
        return path
    if path.exists():  # an interrupted build: start again
        path.unlink()
    sim = build_cluster(seed=seed, gpus=gpus, start=start, days=days, interval_s=interval_s, config=cfg, dirt=False,
                        regime=regime)
    with warehouse.open_writer(path) as con:
        ensure_config(con, cfg)
        write_simulation(con, sim)
    done.write_text(f"seed {seed}, regime {regime}, {gpus} GPUs, {days:g} days from {start:%Y-%m-%d}\n")
    return path
