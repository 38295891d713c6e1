"""The gpuledger code location: one `Definitions` assembled from the domain folders under `defs/`.

`dg check defs`, `dg dev` and `dagster dev` find it through `[tool.dg]` in pyproject.toml. Each
domain (ingest, usage, fairshare, budgets, squatting, chargeback; enforcement, reports and alerts
later) keeps its assets, checks, schedules and sensors side by side; the package is walked and
every definition found is collected, so a new domain folder needs no edit here. Resources are built
once, from the environment (defs/resources.py).

Every job runs its steps in the run's own process (``in_process_executor``). Dagster's default, a
process per step, loads Dagster and this code location again for each asset and check (~3-5 CPU-s
each): the 5-minute analytics run of 8 steps took 36-46 CPU-s that way and 7-10 CPU-s in one process,
at 16 and 256 GPUs (BENCHMARKS.md "Pipelines: one process per run"). The steps gain nothing from
running apart: every write waits for the one writer (warehouse/access.py) in any case.
"""

import warnings

import dagster as dg
from gpuledger.pipelines import defs as defs_package
from gpuledger.pipelines.defs.resources import resources_from_env


@dg.definitions
def defs() -> dg.Definitions:
    # The package loader is marked "preview"; `load_defs`, which it replaces, is deprecated, and
    # `load_from_defs_folder` resolves the folder from the project layout, which the package-dir
    # mapping breaks (see pyproject.toml [tool.dg]). The warning would print on every code load.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", dg.PreviewWarning)
        return dg.load_definitions_from_package_module(defs_package, resources=resources_from_env(),
                                                       executor=dg.in_process_executor)
