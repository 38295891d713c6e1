"""The Dagster code location: `definitions.py` assembles the `Definitions` from the domain folders
under `defs/` (ingest, usage, fairshare, budgets, squatting, chargeback), each keeping its assets,
checks, schedules, sensors and SQL side by side; `cli.py` / `run_once.py` run the graph once in
process. Dagster is imported only here: a GPU node installs gpuledger[agent] without it."""
