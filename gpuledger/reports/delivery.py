"""E-mailing a statement to finance: the HTML, XLSX and CSV of the org's statement attached,
the reconciliation in the body, through the finance channel (an apprise mailto URL from the
environment, gpuledger.alerts.channels)."""

from __future__ import annotations

from pathlib import Path


def email_statement(policy, manifest: dict, out: Path, *, notifier=None) -> str:
    """Send the statement in ``out`` (described by ``manifest``); returns the channel's name."""
    from gpuledger.alerts.channels import notifier_for
    from gpuledger.errors import UsageError

    channel = policy.reports.finance_channel
    if notifier is None:
        if not channel:
            raise UsageError("--email: set policy.reports.finance_channel in the config (a channel name; its "
                             "URL comes from the environment)")
        notifier = notifier_for(channel)
    top = [f for f in manifest["files"] if "/" not in f["path"] and f["path"].endswith((".html", ".xlsx", ".csv"))]
    body = [f"GPU statement {manifest['period']} for {manifest['scope']}: {manifest['status']}",
            f"config version {manifest['config_version']}, data through {manifest['data_through']}", ""]
    body += [f"total owed {c} {a}" for c, a in manifest["totals"].items()]
    body += [r["statement"] for r in manifest["reconciliation"]]
    body += ["", "files (sha256):"] + [f"  {f['path']}  {f['sha256']}" for f in top]
    notifier.send(f"GPU statement {manifest['period']} ({manifest['status']})", "\n".join(body),
                  attachments=[out / f["path"] for f in top])
    return channel or "(given notifier)"
