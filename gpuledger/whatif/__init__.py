"""What-if: replay job traces under scheduling and procurement policies (issue 13).

Pure: a trace (jobs with their GPU count, pool, duration and activity profile), an inventory and
a policy in; outcomes and metrics out. ``trace`` reads the warehouse, everything else touches no
I/O. Policies 2 and 3 decide through ``gpuledger.enforce.policy`` — the functions that decide
live actions — so the policy measured here is the policy that runs.

Modules: ``model`` (jobs, params, outcomes), ``inventory`` (pools and MIG / fractional packing),
``usage`` (incremental window / decay usage), ``policies`` (the three policies), ``engine``
(the event loop), ``metrics`` (per-policy figures), ``compare`` (side by side, sweeps, JSON),
``procurement`` (pricing capacity mixes), ``trace`` (the warehouse reader), ``cli``.
"""
