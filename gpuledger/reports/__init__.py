"""Finance reports: the month's chargeback statement (``statement/``), the weekly summary per
business unit (``weekly``) and the showback of activity beside the statement (``showback``); what
they share: a table as a file (``table_files``) and deterministic SVG charts (``chart``, also
drawn by ``gpuledger whatif``). Lines come from the ledger through
``gpuledger.ledger.periods.statement_lines`` only (a closed month reads its frozen lines)."""
