"""The deterministic cluster simulator: inventory, org, jobs and DCGM samples from a seed.

Python API::

    sim = build_cluster(seed=1, gpus=64, start=datetime(2026, 11, 1), days=1)
    with start_exporters(sim, port=0, clock=fixed_clock(datetime(2026, 11, 1, 6))) as handle:
        handle.urls  # one dcgm-exporter /metrics URL per node
    write_simulation(con, sim)          # into an open warehouse writer
    write_openmetrics(sim, fh, sim.start_s, sim.end_s)
"""

from gpuledger.simulator.exporter import Exporters, SimClock, fixed_clock, start_exporters
from gpuledger.simulator.exposition import metrics_page, write_openmetrics
from gpuledger.simulator.scenario import SimCluster, build_cluster, from_epoch_s, to_epoch_s
from gpuledger.simulator.to_warehouse import raw_samples, write_simulation

__all__ = [
    "Exporters", "SimClock", "SimCluster", "build_cluster", "fixed_clock", "from_epoch_s",
    "metrics_page", "raw_samples", "start_exporters", "to_epoch_s", "write_openmetrics",
    "write_simulation",
]
