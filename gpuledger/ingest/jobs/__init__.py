"""Job-record sources: who held which GPUs. Kubernetes pods and Kueue workloads, Slurm
accounting, the generic job CSV."""
