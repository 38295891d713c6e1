-- 019: the chargeback page's view of a month's whole-org statement, materialized by the
-- chargeback pipeline beside chargeback_statements (gpuledger.warehouse.read_model.statement_views):
-- the statement's lines exactly as reports.statement.build_statement makes them, with usage and
-- efficiency beside them, and the sentences the page shows. One row per month, replaced whole.
-- The page reads it only while it is as new as the data: the same data "now" (or, for a month that
-- has ended, any "now" past its end), and the same inputs (ledger, inventory, org tree, rate card,
-- jobs, allocations, the month's activity: fingerprinted by statement_view_inputs.sql); else it
-- builds the statement as before. The files finance signs are always written from a statement
-- built when asked (`gpuledger report statement`, the page's downloads), never from this row.
CREATE TABLE statement_views (
    period             VARCHAR NOT NULL PRIMARY KEY,  -- YYYY-MM
    data_now           TIMESTAMP NOT NULL,            -- the data's "now" the statement was built at (UTC)
    materialized_at    TIMESTAMP NOT NULL,            -- UTC
    inputs_mark        VARCHAR NOT NULL,              -- statement_view_inputs.sql when it was built
    scope              VARCHAR NOT NULL,              -- the org root's name
    state_json         VARCHAR NOT NULL,              -- ledger.periods.PeriodState's fields
    billed_through     TIMESTAMP NOT NULL,
    reconciliation_json VARCHAR NOT NULL,             -- [[sentence, reconciles], ...] per currency
    notes_json         VARCHAR NOT NULL,              -- the statement's notes, then its warnings
    usage_json         VARCHAR NOT NULL,              -- {"by_partition": bool, "by_host": bool, "projects": [...], "partition_projects": [...]}
    line_count         INTEGER NOT NULL,
    lines_arrow        BLOB NOT NULL                  -- the lines (reports.statement.LINE_COLUMNS) as Arrow IPC: every dtype round-trips
);
