"""Enforcement: pure decisions (inputs -> planned actions with reasons) and the thin layer that
talks to Kueue / Kubernetes / Slurm. Not built yet: the enforcement issue adds it here, fed by
gpuledger.analytics (squatting findings, job funding, fair-share rank)."""
