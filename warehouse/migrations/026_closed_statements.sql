-- 026: a closed month's statement as its files are written (issue 36). The lines are frozen in
-- statement_lines, but a statement shows more than its lines: usage and efficiency beside them,
-- energy and emissions per job, each line's business unit, the capacity it reconciles against,
-- the month-over-month history, the sites' PUE and grid sentences, its notes. Recomputed, those
-- followed today's inventory, org tree, rates and site config, so a closed month's files moved
-- after a config change (one capacity cell's last float digit after a share change). Stored here
-- at the close and at each correction, already rounded, and read back instead of recomputed:
-- regenerated files are byte-identical whatever changes afterwards. A month closed before this
-- migration has no row until its next correction; its statement is computed as before.
CREATE TABLE closed_statements (
    period            VARCHAR NOT NULL,   -- YYYY-MM
    revision          INTEGER NOT NULL,   -- the latest revision when it was stored (read only while it still is)
    facts_json        VARCHAR NOT NULL,   -- scope, units, billed_through, config version, notes, capacity, site sentences
    lines_arrow       BLOB NOT NULL,      -- the statement's lines (reports.statement.LINE_COLUMNS) as Arrow IPC
    usage_arrow       BLOB NOT NULL,      -- GPU-hours per project, model, tier, partition, host
    job_energy_arrow  BLOB NOT NULL,      -- energy and emissions per job
    history_arrow     BLOB NOT NULL,      -- the month over month amounts
    org_nodes_arrow   BLOB NOT NULL,      -- the org tree as of then (a node's statement is cut from it)
    content_sha256    VARCHAR NOT NULL,   -- over facts_json and the blobs: an edit outside gpuledger is refused
    PRIMARY KEY (period, revision)
);
