"""The squatting severity ladder: a finding's severities from least to most urgent, written once.

A squatting finding is ``info`` below the policy's warn minutes, then ``warning``,
``second-warning`` and ``preempt-eligible`` (policy.squatting's warn / second_warn / preempt
minutes: gpuledger.analytics.squatting); enforcement and alerts act from ``warning`` up (the
stages). Alerts, the weekly report, the dashboards and the what-if rank findings by this order."""

from __future__ import annotations

SEVERITIES = ("info", "warning", "second-warning", "preempt-eligible")
# the stages enforcement warns, escalates and preempts at, and the alerts' minimum severities
STAGES = SEVERITIES[1:]
# severity -> its place on the ladder (0 = info); worst first = highest rank first
SEVERITY_RANK = {severity: rank for rank, severity in enumerate(SEVERITIES)}
