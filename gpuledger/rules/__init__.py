"""The rules kernel: each rule of the domain that more than one part of gpuledger applies, in one
place, below ingest, analytics, the ledger and every surface (CLI, pipelines, dashboards).

* :mod:`~gpuledger.rules.clock` — time is naive UTC: now, ISO-8601 reading and writing, durations;
* :mod:`~gpuledger.rules.hosts` — how a host is spelled in the warehouse;
* :mod:`~gpuledger.rules.model_keys`, :mod:`~gpuledger.rules.mig` — GPU model keys, MIG slices;
* :mod:`~gpuledger.rules.activity` — the best activity signal (polars and SQL forms);
* :mod:`~gpuledger.rules.billing` — which chargeback lines are billed (polars and SQL forms);
* :mod:`~gpuledger.rules.severity` — the squatting severity ladder (order, stage minutes, polars form);

Modules here import nothing of gpuledger outside this package (tests/rules/test_layering.py), so
any layer may use them. Where a rule runs in polars and in SQL, both forms come from one
definition, and a test runs them over the same cases.
"""
