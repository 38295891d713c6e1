-- 007: history that does not move (issue 8, items 5-7).
-- * Every config ever loaded is a version: its content (as loaded), a content hash, where it came
--   from, who loaded it and when. org_nodes / budgets / rate_card stay the *current* version's
--   rows (what open periods are priced by); the versioned copies keep what was known before.
-- * Closed periods: the chargeback statement as issued (lines + checksum), and each correction
--   as its own revision of credit / debit lines. Nothing here is ever updated or deleted.
-- * An audit row for every ledger action (config load, period close, correction): who, when, why.
-- * Node labels (Kubernetes) per host, and a job's own pricing tier, for the tier rules.

CREATE TABLE config_versions (
    version         INTEGER PRIMARY KEY,   -- 1, 2, ... in load order
    content_sha256  VARCHAR NOT NULL,      -- sha256 of the validated content (canonical JSON): comments and layout do not count
    source_path     VARCHAR NOT NULL,      -- the file it was loaded from (or "(library)" for API callers)
    loaded_at       TIMESTAMP NOT NULL,    -- UTC
    loaded_by       VARCHAR NOT NULL,      -- OS user or --by
    content_text    VARCHAR NOT NULL,      -- the YAML as loaded (re-parsed by commands that need the config)
    changes         VARCHAR                -- what changed against the previous version, as printed
);

CREATE TABLE rate_card_versions (
    version             INTEGER NOT NULL,
    gpu_model           VARCHAR NOT NULL,
    tier                VARCHAR NOT NULL,
    effective_from      TIMESTAMP NOT NULL,
    price_per_gpu_hour  DECIMAL(18, 6) NOT NULL,
    currency            VARCHAR NOT NULL,
    budget_weight       DOUBLE NOT NULL,
    PRIMARY KEY (version, gpu_model, tier, effective_from)
);

CREATE TABLE budget_versions (
    version           INTEGER NOT NULL,
    node              VARCHAR NOT NULL,
    period_start      DATE NOT NULL,
    period_end        DATE NOT NULL,
    budget_gpu_hours  DECIMAL(18, 3) NOT NULL,
    PRIMARY KEY (version, node, period_start)
);

-- One row per issued revision of a closed period: revision 0 is the statement as closed,
-- 1, 2, ... are corrections (their lines are the credit / debit differences only).
CREATE TABLE statement_revisions (
    period          VARCHAR NOT NULL,      -- YYYY-MM
    revision        INTEGER NOT NULL,
    period_start    TIMESTAMP NOT NULL,
    period_end      TIMESTAMP NOT NULL,    -- exclusive
    config_version  INTEGER,               -- the config version the lines were priced with
    issued_at       TIMESTAMP NOT NULL,    -- UTC
    issued_by       VARCHAR NOT NULL,
    reason          VARCHAR,               -- corrections: why (required)
    data_now        TIMESTAMP,             -- the data's "now" the lines were computed at
    line_count      INTEGER NOT NULL,
    lines_sha256    VARCHAR NOT NULL,      -- sha256 over the revision's lines_json, in line order
    columns_json    VARCHAR NOT NULL,      -- [[column, polars dtype], ...] per level, to rebuild frames exactly
    PRIMARY KEY (period, revision)
);

CREATE TABLE statement_lines (
    period      VARCHAR NOT NULL,
    revision    INTEGER NOT NULL,
    level       VARCHAR NOT NULL,          -- job / project / node
    line_no     INTEGER NOT NULL,
    line_kind   VARCHAR NOT NULL,          -- charge / idle / ... as issued; credit / debit in corrections
    currency    VARCHAR,
    amount      DECIMAL(38, 2),
    line_json   VARCHAR NOT NULL,          -- the whole line (Decimal as text), canonical JSON
    PRIMARY KEY (period, revision, level, line_no)
);

CREATE TABLE ledger_audit (
    acted_at    TIMESTAMP NOT NULL,        -- UTC
    actor       VARCHAR NOT NULL,          -- OS user or --by
    action      VARCHAR NOT NULL,          -- config-load / period-close / period-correct
    subject     VARCHAR NOT NULL,          -- config version or period
    reason      VARCHAR,
    detail      VARCHAR                    -- what changed, checksums
);

-- Labels of the node a device sits on (Kubernetes node labels; read by the tier rules).
CREATE TABLE node_labels (
    cluster       VARCHAR NOT NULL,
    host          VARCHAR NOT NULL,        -- canonical host: short, lower case (as gpus.host)
    labels_json   VARCHAR NOT NULL,        -- {"karpenter.sh/capacity-type": "spot", ...}
    updated_at    TIMESTAMP NOT NULL,
    PRIMARY KEY (cluster, host)
);

-- A job's pricing tier where its scheduler says so (Slurm partition rules); NULL = the device's
-- tier, or policy.chargeback.default_tier for a job with no device.
ALTER TABLE jobs ADD COLUMN pricing_tier VARCHAR;
