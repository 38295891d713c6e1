"""job_csv_sensor: watch ``sources.jobs_csv.folder`` for new or changed job CSV files.

The cursor maps each file (path relative to the folder) to ``mtime_ns:size`` as last requested;
a tick requests one csv_jobs run per file that is new or whose signature changed, and nothing
when nothing did.
"""

import json
from pathlib import Path

import dagster as dg
from gpuledger.pipelines.defs.ingest.assets import csv_jobs, job_csv_partitions
from gpuledger.pipelines.defs.resources import GpuledgerConfig
from gpuledger.pipelines.defs.run_policy import job_tags

# one file per run (its steps in the run's process, as every job's: pipelines/definitions.py)
csv_jobs_job = dg.define_asset_job("csv_jobs_job", selection=[csv_jobs], tags=job_tags("csv_jobs_job"))


def folder_signatures(folder: Path, pattern: str) -> dict[str, str]:
    """``relative path -> "mtime_ns:size"`` for every file matching ``pattern`` under ``folder``."""
    found = {}
    for path in sorted(folder.glob(pattern)):
        if path.is_file() and not path.name.startswith("."):
            stat = path.stat()
            found[path.relative_to(folder).as_posix()] = f"{stat.st_mtime_ns}:{stat.st_size}"
    return found


@dg.sensor(name="job_csv_sensor", job=csv_jobs_job, minimum_interval_seconds=30,
           default_status=dg.DefaultSensorStatus.RUNNING)
def job_csv_sensor(context: dg.SensorEvaluationContext, gpuledger_config: GpuledgerConfig):
    source = gpuledger_config.load().sources.jobs_csv
    if source is None:
        return dg.SkipReason(f"the config {gpuledger_config.describe()} has no `sources.jobs_csv` folder to watch")
    folder = Path(source.folder)
    if not folder.is_dir():
        return dg.SkipReason(f"sources.jobs_csv.folder {folder} does not exist (yet)")
    before: dict[str, str] = json.loads(context.cursor) if context.cursor else {}
    now = folder_signatures(folder, source.pattern)
    changed = [name for name, signature in now.items() if before.get(name) != signature]
    if not changed:
        return dg.SensorResult(skip_reason=dg.SkipReason(f"no new or changed files in {folder}"),
                               cursor=json.dumps(now, sort_keys=True))
    return dg.SensorResult(
        run_requests=[dg.RunRequest(partition_key=name, run_key=f"{name}@{now[name]}") for name in changed],
        # adding a key the instance already has is a no-op, so changed files need no lookup
        dynamic_partitions_requests=[job_csv_partitions.build_add_request(changed)],
        cursor=json.dumps(now, sort_keys=True),
    )

