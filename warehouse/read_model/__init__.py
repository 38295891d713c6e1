"""The warehouse's read model: the tables the pipelines materialize (migration 009) and the one way
to read them.

- ``materialize``: writing them (replace a partition exactly, stamp rows), for the Dagster assets.
- ``facts``: "the facts as of T" (fair share, budget burn, usage, squatting findings, funding): the
  materialized rows when they are fresh for T (and for the stored policy), else computed by
  gpuledger.analytics.reports; ``Facts.source`` says which. The CLI's read commands, alerts'
  planning and enforcement's inputs ask here.
- ``rows``: a materialized answer as query rows a terminal table prints without polars.

Light at import: DuckDB loads with the query, polars only when an answer is computed or converted."""
