"""What every analytics asset is downstream of: the ingest assets (so the graph, lineage and
"materialize all" order them) — any partition of the job CSV files, all of Prometheus' days
mapped by time."""

import dagster as dg
from gpuledger.pipelines.defs.ingest.assets import (
                                                    csv_jobs,
                                                    dcgm_samples,
                                                    kubernetes_jobs,
                                                    prometheus_samples,
                                                    reference_tables,
                                                    slurm_jobs,
)

INGEST_DEPS = [
    dg.AssetDep(reference_tables), dg.AssetDep(dcgm_samples), dg.AssetDep(kubernetes_jobs),
    dg.AssetDep(slurm_jobs), dg.AssetDep(prometheus_samples),
    dg.AssetDep(csv_jobs, partition_mapping=dg.AllPartitionMapping()),
]
