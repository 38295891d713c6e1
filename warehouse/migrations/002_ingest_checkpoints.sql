-- 002: where each resumable ingest got to (e.g. a Prometheus backfill's last finished chunk),
-- so a rerun after an interruption continues instead of starting over.
CREATE TABLE ingest_checkpoints (
    source      VARCHAR NOT NULL,   -- prometheus / kubernetes / ...
    scope       VARCHAR NOT NULL,   -- what the checkpoint covers, e.g. a URL + query + range
    position    VARCHAR NOT NULL,   -- source-specific: an ISO time, a resourceVersion, ...
    updated_at  TIMESTAMP NOT NULL,
    PRIMARY KEY (source, scope)
);
