-- 012: the alert outbox (gpuledger.alerts). Every alert is written here before it is sent; a
-- delivery worker sends what is due, retries with backoff while a receiver is down, and records
-- every attempt. The idempotency key is the alert's identity (finding × severity × recipient,
-- budget node × period × threshold × recipient, digest team × day × recipient): writing an alert
-- twice keeps the first, so a second sensor tick sends nothing new and a restart loses nothing.

CREATE TABLE alert_outbox (
    idempotency_key  VARCHAR PRIMARY KEY,
    kind             VARCHAR NOT NULL,    -- squatting / budget / digest / statement
    channel          VARCHAR NOT NULL,    -- a channel name from policy.alerts (its URL comes from the environment)
    recipient        VARCHAR,             -- owner e-mail address for owner alerts; NULL: the channel's own
    severity         VARCHAR,             -- squatting: warning / second-warning / preempt-eligible; budget: 80 / 100 / exhaustion
    subject          VARCHAR NOT NULL,
    body             VARCHAR NOT NULL,    -- plain text (Slack mrkdwn-safe)
    payload_json     VARCHAR NOT NULL,    -- the figures, for a JSON webhook
    created_at       TIMESTAMP NOT NULL,  -- the evaluation time ("now" of the data) that raised it
    not_before       TIMESTAMP NOT NULL,  -- quiet hours defer non-urgent alerts to their end
    status           VARCHAR NOT NULL,    -- pending / sent / failed (gave up after max attempts)
    attempts         INTEGER NOT NULL DEFAULT 0,
    next_attempt_at  TIMESTAMP NOT NULL,
    last_error       VARCHAR,
    sent_at          TIMESTAMP
);
CREATE INDEX alert_outbox_due ON alert_outbox (status, next_attempt_at);

CREATE TABLE alert_deliveries (
    idempotency_key  VARCHAR NOT NULL,
    attempt          INTEGER NOT NULL,
    attempted_at     TIMESTAMP NOT NULL,  -- wall clock
    ok               BOOLEAN NOT NULL,
    detail           VARCHAR,
    PRIMARY KEY (idempotency_key, attempt)
);
