"""Retention: raw samples older than policy.retention.raw_sample_days, once their hourly rollups
are complete, are dropped daily (warehouse/retention.py); everything else is kept."""
