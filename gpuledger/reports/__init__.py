"""Finance statements: a month's chargeback statement as finance reads it (CSV, Parquet, XLSX, a
self-contained HTML page with charts, manifest.json), per business unit, reconciled to the cent and
byte-identical when regenerated; the weekly summary; e-mail to finance. Lines come from the
ledger through ``gpuledger.ledger.periods.statement_lines`` only (a closed month reads its frozen lines)."""
