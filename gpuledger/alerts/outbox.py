"""The alert outbox (table alert_outbox, migration 012): write first, send later, once.

* :func:`enqueue` writes alerts whose idempotency key is new (a key already there, sent or not,
  is left alone: a second sensor tick over the same findings adds nothing).
* :func:`deliver` claims what is due (pending, ``next_attempt_at`` and ``not_before`` passed) under
  the writer lock by pushing its ``next_attempt_at`` a lease ahead, sends each alert *outside* the
  lock, then records the attempt (alert_deliveries) and the outcome: sent, or pending again with
  exponential backoff (base × 2^(attempt−1), at most an hour), or failed after max_attempts. A
  process that dies mid-send leaves the row claimed; it is retried when the lease ends, so nothing
  is lost (delivery is at least once; receivers can de-duplicate on the key, which every message
  carries).
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from gpuledger import warehouse
from gpuledger.channels import DeliveryError, Message, plain_fields
from gpuledger.errors import RunError
from gpuledger.rules.clock import utc_now

LEASE = timedelta(minutes=5)
MAX_BACKOFF = timedelta(hours=1)


@dataclass(frozen=True)
class Alert:
    key: str  # the idempotency key
    kind: str
    channel: str
    subject: str
    body: str
    created_at: datetime
    not_before: datetime
    recipient: str | None = None
    severity: str | None = None
    payload: dict = field(default_factory=dict)


@dataclass
class DeliveryReport:
    sent: int = 0
    retried: int = 0
    failed: int = 0
    errors: list[str] = field(default_factory=list)


def enqueue(path, alerts: list[Alert]) -> int:
    """Write the alerts whose key is new; returns how many were new."""
    if not alerts:
        return 0
    unique = {a.key: a for a in alerts}
    with warehouse.open_writer(path) as con, warehouse.transaction(con):
        known = {k for (k,) in con.execute(
            "SELECT idempotency_key FROM alert_outbox WHERE idempotency_key IN (SELECT unnest(?))",
            [list(unique)]).fetchall()}
        rows = [(a.key, a.kind, a.channel, a.recipient, a.severity, a.subject, a.body,
                 json.dumps(plain_fields(a.payload), sort_keys=True, default=str), a.created_at, a.not_before, "pending", 0,
                 a.not_before, None, None) for k, a in sorted(unique.items()) if k not in known]
        if rows:
            con.executemany("INSERT INTO alert_outbox VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)", rows)
    return len(rows)


def _claim(path, now: datetime, limit: int) -> list[tuple]:
    with warehouse.open_writer(path) as con, warehouse.transaction(con):
        due = con.execute(
            "SELECT idempotency_key, channel, recipient, subject, body, attempts, kind, severity, payload_json "
            "FROM alert_outbox "
            "WHERE status = 'pending' AND next_attempt_at <= ? AND not_before <= ? "
            "ORDER BY next_attempt_at, created_at, idempotency_key LIMIT ?", [now, now, limit]).fetchall()
        if due:
            con.execute("UPDATE alert_outbox SET next_attempt_at = ? WHERE idempotency_key IN (SELECT unnest(?))",
                        [now + LEASE, [d[0] for d in due]])
    return due


def backoff(attempt: int, base_seconds: float) -> timedelta:
    return min(timedelta(seconds=base_seconds * 2 ** (attempt - 1)), MAX_BACKOFF)


def deliver(path, notifier_for: Callable, *, now: datetime | None = None, max_attempts: int = 12,
            retry_base_seconds: float = 30, limit: int = 500) -> DeliveryReport:
    """Send what is due at ``now`` (wall clock, UTC; injected by tests). ``notifier_for(channel,
    recipient)`` gives the notifier (gpuledger.channels.notifier_for)."""
    now = now or utc_now()
    report = DeliveryReport()
    for key, channel, recipient, subject, body, attempts, kind, severity, payload in _claim(path, now, limit):
        attempt = attempts + 1
        message = Message(subject=subject, body=body, kind=kind, severity=severity, key=key,
                          fields=json.loads(payload) if payload else {})
        try:
            notifier_for(channel, recipient).deliver(message)
            ok, detail = True, None
        except (DeliveryError, RunError, OSError) as exc:  # one line: the channel, its endpoint, what to do
            ok, detail = False, f"channel {channel}: {exc}"[:500]
        at = utc_now()
        with warehouse.open_writer(path) as con, warehouse.transaction(con):
            con.execute("INSERT INTO alert_deliveries VALUES (?, ?, ?, ?, ?)", [key, attempt, at, ok, detail])
            if ok:
                con.execute("UPDATE alert_outbox SET status = 'sent', attempts = ?, sent_at = ?, last_error = NULL "
                            "WHERE idempotency_key = ?", [attempt, at, key])
                report.sent += 1
            elif attempt >= max_attempts:
                con.execute("UPDATE alert_outbox SET status = 'failed', attempts = ?, last_error = ? "
                            "WHERE idempotency_key = ?", [attempt, detail, key])
                report.failed += 1
                report.errors.append(detail)
            else:
                con.execute("UPDATE alert_outbox SET attempts = ?, last_error = ?, next_attempt_at = ? "
                            "WHERE idempotency_key = ?",
                            [attempt, detail, now + backoff(attempt, retry_base_seconds), key])
                report.retried += 1
                report.errors.append(detail)
    return report


def outbox_rows(con, *, status: str | None = None, limit: int = 50):
    """The outbox, newest first (polars frame)."""
    return con.sql(
        "SELECT created_at, kind, severity, channel, recipient, status, attempts, sent_at, subject, last_error, "
        "idempotency_key FROM alert_outbox WHERE $status IS NULL OR status = $status "
        "ORDER BY created_at DESC, idempotency_key LIMIT $limit", params={"status": status, "limit": limit}).pl()
