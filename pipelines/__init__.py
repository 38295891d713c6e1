"""Dagster definitions (assets, partitions, schedules, sensors) over the analytics in
gpuledger.analytics.reports. Not built yet: the orchestration issue adds them here; `dagster.yaml`
at the top is the instance config they will run under."""
