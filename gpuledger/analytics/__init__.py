"""GPU-time analytics as pure polars functions: LazyFrames in, LazyFrames out.

No Dagster or Streamlit here; the pipelines, CLI and dashboards call these. Modules:
intervals (hour splitting), attribution (per job/GPU/hour usage), usage (window and decay),
fairshare, budget, squatting, chargeback, money, capacity, utilization, tree, load.
"""
