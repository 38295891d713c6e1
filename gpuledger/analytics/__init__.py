"""GPU-time analytics as pure polars functions: LazyFrames in, LazyFrames out.

No Dagster or Streamlit here; the pipelines, CLI and dashboards call these. Modules:
intervals (hour splitting), attribution (per job/GPU/hour usage), usage (window and decay),
fairshare, demand (GPUs asked for per project and hour), budget, squatting, chargeback, money, capacity,
utilization, tree, load; collect (the polars engine the entry points collect with).
"""
