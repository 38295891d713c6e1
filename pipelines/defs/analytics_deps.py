"""What every analytics asset is downstream of: the ingest assets (so the graph, lineage and
"materialize all" order them) — any partition of the job CSV files and of the per-cluster sources,
all of Prometheus' days mapped by time."""

import dagster as dg
from gpuledger.pipelines.defs.ingest.assets import (
                                                    CLUSTER_ASSETS,
                                                    csv_jobs,
                                                    dcgm_samples,
                                                    prometheus_samples,
                                                    reference_tables,
)

INGEST_DEPS = [
    dg.AssetDep(reference_tables), dg.AssetDep(dcgm_samples), dg.AssetDep(prometheus_samples),
    dg.AssetDep(csv_jobs, partition_mapping=dg.AllPartitionMapping()),
    *(dg.AssetDep(asset, partition_mapping=dg.AllPartitionMapping()) for asset in CLUSTER_ASSETS),
]
