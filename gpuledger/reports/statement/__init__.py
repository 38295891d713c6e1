"""The month's finance statement, all of it in one place: a month's chargeback statement as finance
reads it (CSV, Parquet, XLSX, a self-contained HTML page with charts, a PDF, manifest.json), per
business unit, reconciled to the cent and byte-identical when regenerated.

* ``build``: the statement as data (``build_statement``, ``freeze_statement``, ``Statement``);
* ``summary``: what a reader is shown of it without its files (``StatementSummary``: the
  chargeback page, ``report statement`` on screen); its materialized copy is read through
  ``gpuledger.facts.statement_views``;
* ``files``: its files (``write_statement_set``), with ``workbook`` (XLSX), ``focus`` (FOCUS 1.2),
  ``pdf`` (headless Chromium) and ``statement.html.j2``;
* ``frozen_parts``: a closed month's statement as stored; ``closing``: closing and correcting a
  month with its statement (``gpuledger period close / correct``);
* ``delivery``: e-mailing it to finance.
"""
