"""Alerts: a sensor runs the alert cycle (plan into the outbox, deliver what is due)."""
