"""Enforcement: pure decisions (inputs -> planned actions with reasons) and the thin layer that
talks to Kueue / Kubernetes / Slurm (README "Enforcement").

* ``model`` — the records: JobFacts, Finding, Situation in; Action out.
* ``policy`` — the rules and rails, pure (``decide``).
* ``inputs`` — the Situation read from the warehouse (funding, fair share, squatting, history).
* ``audit`` — planned and applied actions, warnings, per-job state (migration 011).
* ``apply`` / ``cycle`` — acting on a plan through one backend; one cycle for the CLI and Dagster.
* ``backends`` — kueue, kubernetes (eviction), slurm, plan-file; one interface (backends.base).
* ``cli`` — ``gpuledger enforce plan | apply | explain | preemptions | replay``.
"""
