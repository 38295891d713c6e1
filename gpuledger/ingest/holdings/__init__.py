"""Who held which GPU, from the scheduler side (issue 20), not from the labels on samples.

Sources: the Slurm prolog/epilog pair in ``deploy/slurm/`` (:mod:`.slurm_spool`), the
``scontrol -d show job --json`` poller (:mod:`.slurm_scontrol`) and the kubelet PodResources
agent (:mod:`.pod_resources`). Each writes ``device_holdings`` rows; :mod:`.store` turns them into
``job_allocations`` rows that take precedence over label-derived ones, and counts every sample
whose labels disagree with them (quarantine source ``attribution``).
"""
