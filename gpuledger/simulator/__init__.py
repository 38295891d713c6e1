"""The deterministic cluster simulator: inventory, org, jobs and DCGM samples from a seed.

Python API::

    sim = build_cluster(seed=1, gpus=64, start=datetime(2026, 11, 1), days=1)
    with start_exporters(sim, port=0, clock=fixed_clock(datetime(2026, 11, 1, 6))) as handle:
        handle.urls  # one dcgm-exporter /metrics URL per node
    write_simulation(con, sim)          # into an open warehouse writer
    write_openmetrics(sim, fh, sim.start_s, sim.end_s)
"""

from gpuledger.lazy import lazy_attributes

# Names resolve on first use (PEP 562): the CLI imports this package for --help without numpy.
_HOMES = {
    "Exporters": "exporter",
    "SimClock": "exporter",
    "fixed_clock": "exporter",
    "start_exporters": "exporter",
    "metrics_page": "exposition",
    "write_openmetrics": "exposition",
    "SimCluster": "scenario",
    "build_cluster": "scenario",
    "from_epoch_s": "scenario",
    "to_epoch_s": "scenario",
    "raw_samples": "to_warehouse",
    "write_simulation": "to_warehouse",
}


__getattr__ = lazy_attributes("gpuledger.simulator", _HOMES, globals())


__all__ = [
    "Exporters", "SimClock", "SimCluster", "build_cluster", "fixed_clock", "from_epoch_s",
    "metrics_page", "raw_samples", "start_exporters", "to_epoch_s", "write_openmetrics",
    "write_simulation",
]
