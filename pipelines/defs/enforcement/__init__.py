"""Enforcement: a plan every cycle (recorded, dry run by default); applying it is its own asset
and job, which acts only when the config says so (policy.enforcement.pipeline_apply)."""
