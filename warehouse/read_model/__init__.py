"""The warehouse's read model: the tables the pipelines materialize (migration 009) and the one way
to read them.

- ``materialize``: writing them (replace a partition exactly, stamp rows), for the Dagster assets.
- ``facts``: "the facts as of T" (fair share, budget burn, usage): the materialized rows when they
  are fresh for T, else computed by gpuledger.analytics.reports; ``Facts.source`` says which.

Light at import: DuckDB and polars load with the query."""
