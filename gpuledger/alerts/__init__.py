"""On-call and owner alerts: squatting findings (per finding and severity, escalation, a daily
digest per team, quiet hours, owner and on-call), budget thresholds and projected exhaustion.
Every alert goes through the warehouse outbox (written before it is sent, retried with backoff,
sent once per idempotency key, each attempt recorded); delivery is apprise's."""
